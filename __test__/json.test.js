'use strict'
// Results you can log: JSON.stringify of everything deadbolt returns works (a bigint would make
// it throw), writes each fencing token as its decimal string, exact beyond 2^53, and JSON.parse
// gives back the documented fields.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const deadbolt = require('..')
const { REDIS_URL, MYSQL_URL, needRedis, needMysql, prefix, redisRaw, closeRaw, freePort } = require('./helpers')

const { connect, createLock, getAcquiredLocks, initialize, getLock, close, LockLostError } = deadbolt

after(async () => {
  closeRaw()
  await close()
})

const roundTrip = (value) => JSON.parse(JSON.stringify(value))

/** A memory store of the test's own, closed when it ends. */
async function memory(t) {
  const locks = await connect(`memory://${prefix('json')}`)
  t.after(() => locks.close())
  return locks
}

test('an inspect() result serializes with its token as a decimal string and its other fields as they are', async (t) => {
  const locks = await memory(t)
  const lock = await locks.acquire('k', { data: 'host-a' })
  const info = await locks.inspect('k')
  assert.deepEqual(roundTrip(info), { key: 'k', owner: lock.owner, holder: info.holder, fencingToken: String(lock.fencingToken), remainingMs: info.remainingMs, data: 'host-a' })
})

test('an inspect() result keeps the documented fields only: its toJSON is not enumerable', async (t) => {
  const locks = await memory(t)
  const lock = await locks.acquire('k')
  const info = await locks.inspect('k')
  assert.deepEqual(Object.keys(info), ['key', 'owner', 'holder', 'fencingToken', 'remainingMs', 'data'])
  assert.deepEqual(info, { key: 'k', owner: lock.owner, holder: info.holder, fencingToken: lock.fencingToken, remainingMs: info.remainingMs, data: null })
  assert.deepEqual(Object.keys(structuredClone(info)), Object.keys(info))
})

test('the inspect() of a Redis lock taken with fencing: false serializes its token as null', async (t) => {
  if (!(await needRedis(t))) return
  const locks = await connect(REDIS_URL)
  t.after(() => locks.close())
  const key = prefix('json') + 'bare'
  await locks.acquire(key, { fencing: false })
  assert.equal(roundTrip(await locks.inspect(key)).fencingToken, null)
})

test('list() serializes with every token as a decimal string', async (t) => {
  const locks = await memory(t)
  const held = [await locks.acquire('a'), await locks.acquire('b')]
  const listed = roundTrip(await locks.list()).sort((x, y) => (x.key < y.key ? -1 : 1))
  assert.deepEqual(listed.map((i) => [i.key, i.owner, i.fencingToken]), held.map((l) => [l.key, l.owner, String(l.fencingToken)]))
})

test('leader() and the Election serialize with the term as a decimal string', async (t) => {
  const locks = await memory(t)
  let elected
  const won = new Promise((resolve) => { elected = resolve })
  const election = locks.elect('e', { onElected: elected })
  t.after(() => election.resign())
  const lock = await won
  assert.deepEqual(roundTrip(election), { name: 'e', isLeader: true, term: String(lock.fencingToken) })
  const leader = roundTrip(await locks.leader('e'))
  assert.deepEqual([leader.key, leader.owner, leader.fencingToken], ['e', lock.owner, String(lock.fencingToken)])
  await election.resign()
  assert.deepEqual(roundTrip(election), { name: 'e', isLeader: false, term: null })
})

test("a semaphore's holders and permits serialize with their tokens as decimal strings", async (t) => {
  const locks = await memory(t)
  const sem = locks.semaphore('s', { limit: 3 })
  const permit = await sem.acquire({ permits: 2 })
  const holders = await sem.holders()
  assert.deepEqual(roundTrip(holders), [{ owner: permit.owner, holder: holders[0].holder, permits: 2, fencingToken: String(permit.fencingToken), remainingMs: holders[0].remainingMs }])
  assert.deepEqual(roundTrip(permit), { key: 's', owner: permit.owner, fencingToken: String(permit.fencingToken), ttl: 10_000, held: true, permits: 2 })
  assert.deepEqual(roundTrip(sem), { name: 's', limit: 3 })
})

test("a read-write lock's holders and holds serialize with their tokens as decimal strings", async (t) => {
  const locks = await memory(t)
  const rw = locks.readWriteLock('rw')
  const hold = await rw.read()
  const [holder] = await rw.holders()
  assert.deepEqual(Object.keys(holder), ['owner', 'holder', 'fencingToken', 'remainingMs', 'mode'])
  assert.deepEqual(roundTrip(holder), { owner: hold.owner, holder: holder.holder, fencingToken: String(hold.fencingToken), remainingMs: holder.remainingMs, mode: 'read' })
  assert.deepEqual(roundTrip(hold), { key: 'rw', owner: hold.owner, fencingToken: String(hold.fencingToken), ttl: 10_000, held: true, mode: 'read' })
  assert.deepEqual(roundTrip(rw), { name: 'rw' })
})

test('a Lock, a reentrant hold, an unfenced lock and a MultiLock serialize with their tokens as strings or null', async (t) => {
  const locks = await memory(t)
  const lock = await locks.acquire('k', { reentrant: true })
  const inner = await locks.acquire('k', { reentrant: true })
  const bare = await locks.acquire('bare', { fencing: false })
  const set = await locks.acquireAll(['x', 'y'])
  assert.deepEqual(roundTrip(lock), { key: 'k', owner: lock.owner, fencingToken: String(lock.fencingToken), ttl: 10_000, held: true })
  assert.equal(roundTrip(inner).fencingToken, String(lock.fencingToken))
  assert.equal(roundTrip(bare).fencingToken, null)
  assert.deepEqual(roundTrip(set), { keys: ['x', 'y'], held: true, locks: set.locks.map((l) => roundTrip(l)) })
  assert.deepEqual(roundTrip(set).locks.map((l) => l.fencingToken), set.locks.map((l) => String(l.fencingToken)))
})

test('a LockLostError serializes with its reason, key and token as a decimal string', async (t) => {
  const locks = await memory(t)
  let lost
  const heard = new Promise((resolve) => { lost = resolve })
  const lock = await locks.acquire('k', { onLost: lost })
  await locks.forceRelease('k')
  await assert.rejects(lock.extend(), { code: 'ERR_LOCK_EXTEND' })
  const err = await heard
  assert.ok(err instanceof LockLostError)
  assert.deepEqual(roundTrip(err), { name: 'LockLostError', code: 'ERR_LOCK_LOST', message: err.message, reason: 'not-owned', key: 'k', fencingToken: String(lock.fencingToken) })
})

test('tokens above 2^53 serialize exactly from inspect, list, a Lock and semaphore holders', async (t) => {
  if (!(await needRedis(t))) return
  const locks = await connect(REDIS_URL)
  t.after(() => locks.close())
  // Locks and semaphores named with one hash tag share their slot's counter; the version-0.1
  // counter of the lock's name, carried over at its first acquisition, raises it past 2^53.
  const tag = prefix('json-big')
  const key = `{${tag}}lock`
  await redisRaw().set(`${key}:fence`, '9007199254740993')
  const lock = await locks.acquire(key)
  assert.equal(lock.fencingToken, 9007199254740994n)
  assert.equal(roundTrip(lock).fencingToken, '9007199254740994')
  assert.equal(roundTrip(await locks.inspect(key)).fencingToken, '9007199254740994')
  assert.deepEqual(roundTrip(await locks.list(`{${tag}}`)).map((i) => i.fencingToken), ['9007199254740994'])
  const sem = locks.semaphore(`{${tag}}sem`, { limit: 2 })
  const permit = await sem.acquire()
  assert.ok(permit.fencingToken > 2n ** 53n)
  assert.deepEqual(roundTrip(await sem.holders()).map((h) => h.fencingToken), [String(permit.fencingToken)])
  assert.equal(BigInt(roundTrip(permit).fencingToken), permit.fencingToken)
  await permit.release()
  await lock.release()
})

test("a redislock-face lock serializes as redislock's own fields, then fencing and its token as a string", async (t) => {
  if (!(await needRedis(t))) return
  // redislock 1.3's own lock, for its fields: its JSON also carried its node_redis client and
  // script cache (_client, _shavaluator), handles the face does not show.
  const redis3 = require('redis3')
  const client = redis3.createClient(REDIS_URL)
  t.after(() => client.quit())
  const theirs = Object.keys(roundTrip(require('redislock').createLock(client))).filter((k) => k !== '_client' && k !== '_shavaluator')
  assert.deepEqual(theirs, ['_id', '_locked', '_key', 'timeout', 'retries', 'delay'])
  const key = prefix('json-rl') + 'k'
  const lock = createLock(REDIS_URL, { timeout: 5000, fencing: true })
  await lock.acquire(key)
  t.after(() => lock.release().catch(() => {}))
  const json = roundTrip(lock)
  assert.deepEqual(Object.keys(json), [...theirs, 'fencing', 'fencingToken'])
  assert.deepEqual(json, { _id: lock._id, _locked: true, _key: key, timeout: 5000, retries: 0, delay: 50, fencing: true, fencingToken: String(lock.fencingToken) })
  assert.deepEqual(roundTrip(getAcquiredLocks()).find((l) => l._id === lock._id), json)
})

test('a redislock-face lock without a token serializes its token as null', async (t) => {
  if (!(await needRedis(t))) return
  const lock = createLock(REDIS_URL)
  await lock.acquire(prefix('json-rl') + 'k')
  t.after(() => lock.release())
  assert.deepEqual([roundTrip(lock)._locked, roundTrip(lock).fencing, roundTrip(lock).fencingToken], [true, false, null])
})

test('a sql-lock releaser serializes as its token, a decimal string', async (t) => {
  if (!(await needMysql(t))) return
  await initialize(MYSQL_URL)
  const release = await getLock(prefix('json-sql') + 'k')
  t.after(() => release())
  assert.deepEqual(roundTrip({ release }), { release: { fencingToken: String(release.fencingToken) } })
  assert.deepEqual(Object.keys(release), ['fencingToken'])
})

test('every error class serializes with its name, code and message', () => {
  const { DLMError, DLMErrorTypes } = deadbolt
  for (const name of ['LockError', 'LockAcquisitionError', 'LockReleaseError', 'LockExtendError', 'LockBackendError', 'LockClosedError', 'LockAbortedError']) {
    const err = new deadbolt[name]('what happened')
    assert.deepEqual(roundTrip(err), roundTrip({ name, code: err.code, message: 'what happened' }), name)
  }
  const dlm = new DLMError({ err_type: DLMErrorTypes.NOT_INITIALIZED, err_message: 'configuration not set' })
  assert.deepEqual(roundTrip(dlm), { name: 'DLMError', code: 'ERR_LOCK_NOT_INITIALIZED', message: 'configuration not set', err_type: 'not_initialized', err_message: 'configuration not set' })
})

test("a store's failure serializes with its cause's code and message, down the chain", async () => {
  const err = await connect(`redis://:S3cretPw@127.0.0.1:${await freePort()}`, { connectTimeout: 1_000 }).then(() => assert.fail('connected'), (e) => e)
  const json = roundTrip(err)
  assert.equal(json.name, 'LockBackendError')
  assert.equal(json.code, 'ERR_LOCK_BACKEND')
  assert.equal(json.message, err.message)
  assert.deepEqual(json.cause, { name: 'Error', code: 'ERR_LOCK_STORE_UNREACHABLE', message: err.cause.message })
  assert.deepEqual(roundTrip(err.cause), json.cause)
  assert.ok(!JSON.stringify(err).includes('S3cretPw'))
  assert.ok(!JSON.stringify(err).includes('    at '), 'no stack')
})

test("a sql-lock face's bad-input error serializes with its name, code, message and fields", async () => {
  const bad = await initialize(42).then(() => assert.fail('initialized'), (e) => e)
  assert.deepEqual(roundTrip(bad), { name: bad.name, code: 'ERR_INVALID_ARG_TYPE', message: bad.message, err_type: 'invalid_parameters', err_message: bad.err_message })
})

test('an error whose cause is an abort reason string serializes the reason', () => {
  const err = new deadbolt.LockAbortedError('aborted', { cause: 'shutting down' })
  assert.equal(roundTrip(err).cause, 'shutting down')
})
