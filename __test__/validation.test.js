'use strict'
// Argument checks, one behaviour per test: numbers the native side cannot represent, lone
// surrogates, options inherited from Object.prototype, the ttl/extendEvery rule, and the other
// inputs that crashed, hung or silently misbehaved. Bad input must be a TypeError/RangeError
// with a stable code naming the argument, refused before any I/O: the "dead" clients below
// point at a port where nothing listens, so an attempt at I/O would be a LockBackendError.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const deadbolt = require('..')
const { REDIS_URL, MYSQL_URL, needRedis, needMysql, prefix, eventually, freePort } = require('./helpers')

const {
  connect, Election, LockClosedError,
  createLock, setDefaults,
  initialize, getLock, transaction, close: closeSqlLock, DLMError,
} = deadbolt

const MAX_MS = 2 ** 31 - 1
const run = prefix('validation')
let n = 0
const key = (name = 'k') => `${run}${++n}:${name}`

/** A port that was just closed: nothing answers there. */
const closedPort = freePort

let dead // modern client, lazy, on a closed Redis port
let deadUrl
let mem // modern client on a private memory store
before(async () => {
  deadUrl = `redis://127.0.0.1:${await closedPort()}`
  dead = await connect(deadUrl, { lazy: true, connectTimeout: 200, responseTimeout: 200 })
  mem = await connect(`memory://${run}`)
})
after(async () => {
  await dead.close()
  await mem.close()
  await closeSqlLock()
})

/** Asserts a TypeError/RangeError with `code` whose message names `name`. */
function badInput(Class, code, name) {
  return (err) => {
    assert.ok(err instanceof Class, `${err?.name}: ${err?.message} is not a ${Class.name}`)
    assert.equal(err.code, code, err.message)
    assert.ok(err.message.includes(name), `"${err.message}" does not name ${name}`)
    return true
  }
}
const outOfRange = (name) => badInput(RangeError, 'ERR_OUT_OF_RANGE', name)
const wrongType = (name) => badInput(TypeError, 'ERR_INVALID_ARG_TYPE', name)
const badValue = (name) => badInput(TypeError, 'ERR_INVALID_ARG_VALUE', name)

/** Runs `fn` with `values` assigned on Object.prototype, deleting them afterwards. */
async function withPolluted(values, fn) {
  // eslint-disable-next-line no-extend-native
  for (const [k, value] of Object.entries(values)) Object.prototype[k] = value
  try {
    return await fn()
  } finally {
    for (const k of Object.keys(values)) delete Object.prototype[k]
  }
}

// ───────────── 1. numbers the native side cannot represent ─────────────

test('wait and maxHold beyond 2^31-1 ms are refused with a RangeError naming the option', async () => {
  for (const value of [1e300, 1e22, MAX_MS + 1, Number.MAX_VALUE, 2 ** 53 + 1]) {
    await assert.rejects(dead.acquire(key(), { wait: value }), outOfRange('options.wait'), String(value))
    await assert.rejects(dead.tryAcquire(key(), { wait: value }), outOfRange('options.wait'), String(value))
    await assert.rejects(dead.acquire(key(), { autoExtend: true, maxHold: value }), outOfRange('options.maxHold'), String(value))
    await assert.rejects(dead.withLock(key(), { maxHold: value }, () => {}), outOfRange('options.maxHold'), String(value))
  }
})

test('wait and maxHold refuse NaN, negative numbers, -Infinity and non-numbers', async () => {
  for (const value of [NaN, -1, -0.5, -Infinity]) {
    await assert.rejects(dead.acquire(key(), { wait: value }), outOfRange('options.wait'), String(value))
    await assert.rejects(dead.acquire(key(), { maxHold: value }), outOfRange('options.maxHold'), String(value))
  }
  for (const value of ['10', 10n, true, {}]) {
    await assert.rejects(dead.acquire(key(), { wait: value }), wrongType('options.wait'), String(value))
    await assert.rejects(dead.acquire(key(), { maxHold: value }), wrongType('options.maxHold'), String(value))
  }
})

test('wait and maxHold accept 0, fractions, 2^31-1 and Infinity', async () => {
  for (const value of [0, -0, 0.5, 1.25, MAX_MS, Infinity]) {
    const lock = await mem.tryAcquire(key(), { wait: value, autoExtend: true, maxHold: value === 0 ? 1000 : value })
    assert.ok(lock, String(value))
    assert.equal(await lock.release(), true)
  }
})

test('ttl, retryDelay, extendEvery and jitter refuse NaN, Infinity, fractions and values beyond their range', async () => {
  for (const value of [NaN, Infinity, -Infinity, 1.5, 0, -1, MAX_MS + 1, 1e300]) {
    await assert.rejects(dead.acquire(key(), { ttl: value }), outOfRange('options.ttl'), String(value))
    await assert.rejects(dead.acquire(key(), { retryDelay: value }), outOfRange('options.retryDelay'), String(value))
    await assert.rejects(dead.acquire(key(), { extendEvery: value }), outOfRange('options.extendEvery'), String(value))
  }
  for (const value of [NaN, Infinity, -0.1, 1.01, 1e300]) {
    await assert.rejects(dead.acquire(key(), { jitter: value }), outOfRange('options.jitter'), String(value))
  }
})

test('fencing that is not a boolean is refused with a TypeError naming options.fencing', async () => {
  for (const fencing of [0, 'false', null, {}]) {
    for (const call of [() => dead.acquire(key(), { fencing }), () => dead.tryAcquire(key(), { fencing }), () => dead.withLock(key(), { fencing }, () => {}), () => dead.acquireAll([key()], { fencing })]) {
      // null is "not given" for every option but a boolean one, where it is a wrong type.
      if (fencing === null) continue
      await assert.rejects(call(), (err) => err instanceof TypeError && err.code === 'ERR_INVALID_ARG_TYPE' && err.message.includes('options.fencing'))
    }
  }
})

test('semaphores and read-write locks refuse fencing, since every permit has a token', async () => {
  const sem = mem.semaphore(key('sem'), { limit: 2 })
  await assert.rejects(sem.tryAcquire({ fencing: false }), (err) => err instanceof TypeError && err.code === 'ERR_INVALID_ARG_VALUE' && err.message.includes('options.fencing'))
  const rw = mem.readWriteLock(key('rw'))
  await assert.rejects(rw.tryRead({ fencing: false }), (err) => err instanceof TypeError && err.code === 'ERR_INVALID_ARG_VALUE' && err.message.includes('options.fencing'))
})

test('a reentrant hold that needs a token cannot join a lock the client took with fencing: false', async () => {
  const k = key('reentrant-bare')
  const outer = await mem.acquire(k, { reentrant: true, fencing: false })
  await assert.rejects(mem.acquire(k, { reentrant: true }), (err) => err instanceof TypeError && err.code === 'ERR_INVALID_ARG_VALUE' && err.message.includes('options.fencing'))
  const inner = await mem.acquire(k, { reentrant: true, fencing: false })
  assert.equal(inner.fencingToken, null)
  await inner.release()
  assert.equal(outer.held, true, 'the refused hold left the lock as it was')
  await outer.release()
})

test('connect refuses numeric options that are not bounded integers, before any I/O', async () => {
  const cases = [
    ['ttl', 1e300], ['ttl', Infinity], ['retryDelay', MAX_MS + 1], ['retryDelay', NaN], ['jitter', NaN],
    ['connectTimeout', 1e300], ['connectTimeout', 0.5], ['responseTimeout', Infinity], ['responseTimeout', -1],
    ['poolSize', 0], ['poolSize', 1001], ['poolSize', NaN], ['poolSize', Infinity],
  ]
  for (const [name, value] of cases) {
    await assert.rejects(connect(deadUrl, { [name]: value }), outOfRange(`options.${name}`), `${name}: ${value}`)
  }
})

test('elect refuses a ttl or retryDelay that is not a bounded integer', () => {
  for (const value of [1e300, MAX_MS + 1, NaN, 0.5, Infinity]) {
    assert.throws(() => dead.elect(key(), { ttl: value }), outOfRange('options.ttl'), String(value))
    assert.throws(() => dead.elect(key(), { retryDelay: value }), outOfRange('options.retryDelay'), String(value))
  }
})

test('redislock timeout, retries and delay refuse values that are not bounded integers', () => {
  for (const [name, value] of [['timeout', 1e300], ['timeout', MAX_MS + 1], ['timeout', Infinity], ['delay', 1e300], ['delay', Infinity],
    ['retries', Infinity], ['retries', 2 ** 53 + 1], ['retries', 1e300]]) {
    assert.throws(() => createLock(deadUrl, { [name]: value }), outOfRange(name), `${name}: ${value}`)
  }
})

test('redislock extend(time) refuses a time beyond 2^31-1 ms', async () => {
  const lock = createLock(deadUrl)
  for (const value of [1e300, MAX_MS + 1, Infinity, NaN]) {
    await assert.rejects(lock.extend(value), outOfRange('time'), String(value))
  }
})

test('redislock retries of -1, 0 and Number.MAX_SAFE_INTEGER are accepted', () => {
  for (const retries of [-1, 0, Number.MAX_SAFE_INTEGER]) assert.equal(createLock(deadUrl, { retries }).retries, retries)
})

test('setDefaults refuses a number that parseInt would misread and keeps the previous defaults', () => {
  for (const [name, value] of [['timeout', 1e21], ['timeout', 5e-7], ['delay', Infinity], ['retries', NaN]]) {
    assert.throws(() => setDefaults({ [name]: value }), outOfRange(name), `${name}: ${value}`)
  }
  assert.throws(() => setDefaults({ timeout: 2000, retries: -2 }), outOfRange('retries'))
  const lock = createLock(deadUrl)
  assert.deepEqual([lock.timeout, lock.retries, lock.delay], [10000, 0, 50])
})

test('setDefaults refuses a value out of range at once rather than at the next createLock', () => {
  assert.throws(() => setDefaults({ timeout: 0 }), outOfRange('timeout'))
  assert.throws(() => setDefaults({ delay: 2 ** 40 }), outOfRange('delay'))
  assert.throws(() => setDefaults({ timeout: Symbol('t') }), wrongType('timeout'))
  assert.equal(createLock(deadUrl).timeout, 10000)
})

test('setDefaults still parses numeric strings and truncates fractions, as redislock did', () => {
  try {
    setDefaults({ timeout: '2500', delay: 20.9 })
    const lock = createLock(deadUrl)
    assert.deepEqual([lock.timeout, lock.delay], [2500, 20])
  } finally {
    setDefaults({ timeout: 10000, retries: 0, delay: 50 })
  }
})

test('sql-lock getLock ttl and initialize locking_ttl refuse values beyond 2^31-1 ms', async () => {
  for (const value of [1e300, MAX_MS + 1, Infinity]) {
    await assert.rejects(getLock(key(), value), (err) => err instanceof DLMError && outOfRange('ttl')(err), String(value))
    await assert.rejects(initialize(MYSQL_URL, { locking_ttl: value }), (err) => err instanceof DLMError && outOfRange('options.locking_ttl')(err), String(value))
  }
})

// ───────────── 2. lone surrogates ─────────────

const LONE = ['a\uD800', '\uDC00', 'x\uDFFFy', '\uD83D', 'ok\uDE00\uD83D']

test('a key with a lone surrogate is refused by acquire, tryAcquire, withLock, inspect and leader', async () => {
  for (const k of LONE) {
    await assert.rejects(dead.acquire(k), badValue("'key'"), JSON.stringify(k))
    await assert.rejects(dead.tryAcquire(k), badValue("'key'"), JSON.stringify(k))
    await assert.rejects(dead.withLock(k, () => {}), badValue("'key'"), JSON.stringify(k))
    await assert.rejects(dead.inspect(k), badValue("'key'"), JSON.stringify(k))
    await assert.rejects(dead.leader(k), badValue("'key'"), JSON.stringify(k))
  }
})

test('an election name with a lone surrogate is refused', () => {
  for (const k of LONE) assert.throws(() => dead.elect(k), badValue("'name'"), JSON.stringify(k))
})

test('a key with a lone surrogate is refused by the redislock face', async () => {
  const lock = createLock(deadUrl)
  for (const k of LONE) await assert.rejects(lock.acquire(k), badValue("'key'"), JSON.stringify(k))
})

test('a key with a lone surrogate is refused by getLock and transaction', async () => {
  for (const k of LONE) {
    await assert.rejects(getLock(k), (err) => err instanceof DLMError && err.err_message === 'Invalid Key' && badValue("'key'")(err))
    await assert.rejects(transaction(k, () => 1), (err) => err instanceof DLMError && badValue("'key'")(err))
  }
})

test('a string payload with a lone surrogate is refused, for a lock and for an election', async () => {
  for (const data of LONE) {
    await assert.rejects(dead.acquire(key(), { data }), badValue("'options.data'"), JSON.stringify(data))
    assert.throws(() => dead.elect(key(), { data }), badValue("'options.data'"), JSON.stringify(data))
  }
})

test('keys and payloads with well-formed astral characters round-trip', async () => {
  const k = `${key()}:😀\u{10FFFF}`
  const lock = await mem.acquire(k, { data: 'payload 😀 \u{1F600}' })
  const info = await mem.inspect(k)
  assert.equal(info.key, k)
  assert.equal(info.owner, lock.owner)
  assert.equal(info.data, 'payload 😀 \u{1F600}')
  assert.equal(await lock.release(), true)
})

test('keys of every script acquired in one tick are each the key locked', async () => {
  // One tick's acquisitions cross together, their keys one after the other in one text.
  const keys = ['plain', 'é', 'ééé:x', '日本語', '😀', 'a😀b\u{10FFFF}', 'z'].map((s) => `${key()}:${s}`)
  const locks = await Promise.all(keys.map((k) => mem.acquire(k)))
  for (const [i, k] of keys.entries()) {
    const info = await mem.inspect(k)
    assert.equal(info?.key, k)
    assert.equal(info?.owner, locks[i].owner, k)
    assert.equal(await mem.tryAcquire(k), null, `${k} was not held`)
  }
  for (const lock of locks) assert.equal(await lock.release(), true)
})

test('a URL with a lone surrogate is refused without echoing it', async () => {
  await assert.rejects(connect('memory://secret\uD800'), (err) => badValue("'url'")(err) && !err.message.includes('secret'))
  assert.throws(() => createLock('redis://:pw\uD800@127.0.0.1:6379'), (err) => badValue("'client'")(err) && !err.message.includes('pw'))
})

// ───────────── 3. options inherited from Object.prototype ─────────────

test('acquire ignores options inherited from Object.prototype', async () => {
  const k = key()
  const lock = await withPolluted({ ttl: 5, wait: 'x', autoExtend: true, data: 'polluted' }, () => mem.acquire(k, { retryDelay: 10 }))
  assert.equal(lock.ttl, 10_000)
  const info = await mem.inspect(k)
  assert.ok(info.remainingMs > 5_000, `remaining ${info.remainingMs}`)
  assert.equal(info.data, null)
  assert.equal(await lock.release(), true)
})

test('withLock ignores an onLost inherited from Object.prototype', async () => {
  const result = await withPolluted({ onLost: 'not a function', ttl: 5 }, () => mem.withLock(key(), {}, (lock) => lock.ttl))
  assert.equal(result, 10_000)
})

test('connect ignores options inherited from Object.prototype', async () => {
  const client = await withPolluted({ ttl: 5, poolSize: 1.5, connectTimeout: 'soon', lazy: 'yes', table: 'no such table!' },
    () => connect(`memory://${run}`))
  try {
    const lock = await client.acquire(key())
    assert.equal(lock.ttl, 10_000)
    await lock.release()
  } finally {
    await client.close()
  }
})

test('elect ignores options inherited from Object.prototype', async () => {
  let onElected
  const elected = new Promise((resolve) => { onElected = resolve })
  const election = await withPolluted({ ttl: 5, onElected: 'x', retryDelay: 0.5 }, () => mem.elect(key('election'), { onElected }))
  const lock = await elected
  assert.equal(lock.ttl, 5_000)
  await election.resign()
})

test('createLock and setDefaults ignore options inherited from Object.prototype', async () => {
  const lock = await withPolluted({ timeout: 5, retries: 'x' }, () => createLock(deadUrl, {}))
  assert.deepEqual([lock.timeout, lock.retries, lock.delay], [10000, 0, 50])
  await withPolluted({ timeout: 5 }, () => setDefaults({ delay: 50 }))
  assert.equal(createLock(deadUrl).timeout, 10000)
})

test('a redis options object ignores a path, db or password inherited from Object.prototype', async (t) => {
  if (!(await needRedis(t))) return
  const { hostname, port } = new URL(REDIS_URL)
  const polluted = { path: '/nonexistent/redis.sock', db: 9, password: 'wrong', tls: true }
  const lock = await withPolluted(polluted, () => createLock({ host: hostname, port: Number(port || 6379) }))
  await lock.acquire(key())
  await lock.release()
})

test('initialize ignores options inherited from Object.prototype', async (t) => {
  if (!(await needMysql(t))) return
  await withPolluted({ locking_ttl: 'soon', poolSize: 1.5, table: 'bad name!' }, () => initialize(MYSQL_URL))
  const release = await getLock(key())
  await release()
  await closeSqlLock()
})

// ───────────── 4. the ttl / extendEvery rule ─────────────

test('a plain lease of ttl 1 is accepted', async () => {
  // Accepted: no error. The grant may come back past its 1 ms lease's local deadline, and is
  // then given back (null) rather than returned already lost.
  const lock = await mem.tryAcquire(key(), { ttl: 1, onLost() {} })
  if (lock !== null) {
    assert.equal(lock.ttl, 1)
    await lock.release()
  }
})

test('ttl 1 with autoExtend is refused with an error that names ttl, not extendEvery', async () => {
  const check = (err) => {
    outOfRange('options.ttl')(err)
    assert.match(err.message, /at least 2 with autoExtend/)
    assert.ok(!err.message.includes('extendEvery'), err.message)
    return true
  }
  await assert.rejects(dead.acquire(key(), { ttl: 1, autoExtend: true }), check)
  await assert.rejects(dead.withLock(key(), { ttl: 1 }, () => {}), check)
})

test('ttl 2 with autoExtend is accepted (a heartbeat every 1 ms)', async () => {
  // Accepted, not kept: the heartbeat cannot keep a lease under ~10 ms (see the Rust report).
  // A grant that comes back past its 2 ms lease's local deadline is given back: then the
  // acquisition fails as one that got nothing, never with a range error.
  const outcome = await mem.acquire(key(), { ttl: 2, autoExtend: true, onLost() {} }).then((lock) => lock, (err) => err)
  if (outcome instanceof Error) return assert.equal(outcome.code, 'ERR_LOCK_ACQUISITION')
  assert.equal(outcome.ttl, 2)
  await outcome.release()
})

test('an extendEvery that was given must be less than ttl, with or without autoExtend', async () => {
  await assert.rejects(dead.acquire(key(), { ttl: 100, extendEvery: 100 }), outOfRange('options.extendEvery'))
  await assert.rejects(dead.acquire(key(), { ttl: 100, extendEvery: 100, autoExtend: true }), outOfRange('options.extendEvery'))
})

// ───────────── 5. poolSize ─────────────

test('poolSize must be an integer', async () => {
  for (const poolSize of [1.5, 0.5, 999.999]) {
    await assert.rejects(connect('mysql://root@127.0.0.1:1/test', { poolSize, lazy: true }), outOfRange('options.poolSize'), String(poolSize))
    await assert.rejects(initialize('mysql://root@127.0.0.1:1/test', { poolSize }), (err) => err instanceof DLMError && outOfRange('options.poolSize')(err))
  }
  await assert.rejects(connect('mysql://root@127.0.0.1:1/test', { poolSize: '10' }), wrongType('options.poolSize'))
})

// ───────────── other input that crashed, hung or misbehaved ─────────────

test('a signal-like object without removeEventListener is refused instead of crashing the settlement', async () => {
  const fake = { aborted: false, addEventListener() {} }
  await assert.rejects(mem.acquire(key(), { signal: fake }), wrongType('options.signal'))
  await assert.rejects(mem.tryAcquire(key(), { signal: fake }), wrongType('options.signal'))
  assert.throws(() => mem.elect(key(), { signal: fake }), wrongType('options.signal'))
})

test('connect refuses a lazy option that is not a boolean', async () => {
  await assert.rejects(connect(deadUrl, { lazy: 'yes' }), wrongType('options.lazy'))
  await assert.rejects(connect(deadUrl, { lazy: 1 }), wrongType('options.lazy'))
})

test('elect on a closed client throws LockClosedError instead of never campaigning', async () => {
  const client = await connect(`memory://${run}`)
  await client.close()
  assert.throws(() => client.elect(key()), (err) => err instanceof LockClosedError && err.code === 'ERR_LOCK_CLOSED')
})

test('new Election with a bad name or options throws instead of retrying forever in the background', () => {
  assert.throws(() => new Election(mem, 42, {}), wrongType('name'))
  assert.throws(() => new Election(mem, '', {}), badValue("'name'"))
  assert.throws(() => new Election(mem, key(), 'opts'), wrongType('options'))
})

test('withLock with autoExtend: undefined keeps its default and extends the lease', async () => {
  // Observed, not timed: the lease's local deadline moves forward, which only an extension does.
  const held = await mem.withLock(key(), { ttl: 1000, autoExtend: undefined }, async (lock) => {
    const first = lock.validUntil
    await eventually(() => lock.validUntil > first, 5000, 'an extension')
    return lock.held
  })
  assert.equal(held, true)
})

test('createLock options of undefined or null keep the defaults, as redislock kept a usable value', () => {
  const lock = createLock(deadUrl, { timeout: undefined, retries: null, delay: undefined })
  assert.deepEqual([lock.timeout, lock.retries, lock.delay], [10000, 0, 50])
})

test('createLock and setDefaults refuse options that are not objects', () => {
  assert.throws(() => createLock(deadUrl, 'fast'), wrongType('options'))
  assert.throws(() => createLock(deadUrl, 5), wrongType('options'))
  assert.throws(() => setDefaults('fast'), wrongType('options'))
})

test('a redis options object with a malformed url or a negative db is refused with ERR_INVALID_ARG_VALUE', () => {
  assert.throws(() => createLock({ url: 'not a url' }), badValue("'client.url'"))
  assert.throws(() => createLock({ url: 'http://127.0.0.1:6379' }), badValue("'client.url'"))
  assert.throws(() => createLock({ url: 'redis://[::1' }), badValue("'client.url'"))
  assert.throws(() => createLock({ host: '127.0.0.1', db: -1 }), badValue("'client.db'"))
  assert.throws(() => createLock({ host: '127.0.0.1', db: 1.5 }), badValue("'client.db'"))
})

test('a payload over 1 MiB is refused before it is copied', async () => {
  await assert.rejects(dead.acquire(key(), { data: 'x'.repeat(1024 * 1024 + 1) }), outOfRange('options.data.length'))
  await assert.rejects(dead.acquire(key(), { data: Buffer.alloc(1024 * 1024 + 1) }), outOfRange('options.data.length'))
  const lock = await mem.acquire(key(), { data: 'é'.repeat(512 * 1024) })
  await lock.release()
})

// Found by the fuzz tests; the fix belongs to the Redis key scheme (src/backend/keys.rs).
// That a Redis key spelling another key's old side key ({k}:fence) is a lock of its own is
// tested in redis.layout.test.js.

// ───────────── unknown option keys ─────────────

test('a misspelt acquire option is a TypeError naming it and the closest known option', async () => {
  await assert.rejects(mem.acquire(key(), { tll: 5000 }), (err) => {
    assert.equal(err.name, 'TypeError')
    assert.equal(err.code, 'ERR_INVALID_ARG_VALUE')
    assert.match(err.message, /"tll"/)
    assert.match(err.message, /Did you mean "ttl"\?/)
    return true
  })
})

test('a misspelt connect or elect option is a TypeError naming it and the closest known option', async () => {
  await assert.rejects(connect('memory://typo', { responseTimout: 5 }), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE', message: /Did you mean "responseTimeout"\?/ })
  assert.throws(() => mem.elect(key(), { onElect() {} }), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE', message: /Did you mean "onElected"\?/ })
})

// ───────────── options must be plain objects ─────────────

/** Objects that are not plain: own-property reads would take each as `{}` (or its indices). */
const NOT_PLAIN = () => [[], ['ttl'], new Date(0), new Map([['ttl', 5]]), new Set(), /ttl/, new (class Options { constructor() { this.ttl = 5 } })(),
  new Number(5), new String('ttl'), new Boolean(true), Object.create({ ttl: 5 }), new Error('x'), Promise.resolve()]

test('acquire, tryAcquire and withLock refuse options that are not a plain object with a TypeError naming options', async () => {
  for (const options of NOT_PLAIN()) {
    const what = Object.prototype.toString.call(options)
    await assert.rejects(dead.acquire(key(), options), wrongType('"options"'), what)
    await assert.rejects(dead.tryAcquire(key(), options), wrongType('"options"'), what)
    await assert.rejects(dead.withLock(key(), options, () => {}), wrongType('"options"'), what)
  }
})

test('connect refuses options that are not a plain object with a TypeError naming options', async () => {
  for (const options of NOT_PLAIN()) {
    await assert.rejects(connect(deadUrl, options), wrongType('"options"'), Object.prototype.toString.call(options))
  }
})

test('semaphores, read-write locks and acquireAll refuse options that are not a plain object', async () => {
  const sem = mem.semaphore(key(), { limit: 2 })
  const rw = mem.readWriteLock(key())
  for (const options of NOT_PLAIN()) {
    const what = Object.prototype.toString.call(options)
    assert.throws(() => mem.semaphore(key(), options), wrongType('"options"'), what)
    await assert.rejects(sem.acquire(options), wrongType('"options"'), what)
    await assert.rejects(sem.tryAcquire(options), wrongType('"options"'), what)
    await assert.rejects(sem.withPermit(options, () => {}), wrongType('"options"'), what)
    await assert.rejects(rw.read(options), wrongType('"options"'), what)
    await assert.rejects(rw.write(options), wrongType('"options"'), what)
    await assert.rejects(dead.acquireAll([key()], options), wrongType('"options"'), what)
  }
})

test('elect and list refuse options that are not a plain object', async () => {
  for (const options of NOT_PLAIN()) {
    const what = Object.prototype.toString.call(options)
    assert.throws(() => mem.elect(key(), options), wrongType('"options"'), what)
    await assert.rejects(mem.list('', options), wrongType('"options"'), what)
  }
})

test('the redislock face refuses createLock and setDefaults options that are not a plain object', () => {
  for (const options of NOT_PLAIN()) {
    const what = Object.prototype.toString.call(options)
    assert.throws(() => createLock(deadUrl, options), wrongType('"options"'), what)
    assert.throws(() => setDefaults(options), wrongType('"options"'), what)
  }
  assert.deepEqual([createLock(deadUrl).timeout, createLock(deadUrl).retries], [10000, 0])
})

test('sql-lock initialize refuses options that are not a plain object as invalid parameters', async () => {
  for (const options of NOT_PLAIN()) {
    await assert.rejects(initialize('mysql://root@127.0.0.1:1/test', options),
      (err) => err instanceof DLMError && err.err_type === 'invalid_parameters' && wrongType('"options"')(err), Object.prototype.toString.call(options))
  }
})

test('options with a null prototype or from another realm are plain objects and are used', async () => {
  const vm = require('node:vm')
  for (const options of [Object.assign(Object.create(null), { ttl: 4321 }), vm.runInNewContext('({ ttl: 4321 })')]) {
    const lock = await mem.acquire(key(), options)
    assert.equal(lock.ttl, 4321)
    await lock.release()
    assert.equal(createLock(deadUrl, Object.assign(Object.create(null), { timeout: 4321 })).timeout, 4321)
  }
})

// ───────────── maxHold and elections' ttl ─────────────

test('maxHold 0 with autoExtend is refused with a RangeError naming maxHold, as it would resolve a lock already given up', async () => {
  for (const maxHold of [0, -0]) {
    await assert.rejects(mem.acquire(key(), { autoExtend: true, maxHold }), outOfRange('options.maxHold'))
    await assert.rejects(mem.tryAcquire(key(), { autoExtend: true, maxHold }), outOfRange('options.maxHold'))
    // withLock extends automatically by default.
    await assert.rejects(mem.withLock(key(), { maxHold }, () => {}), outOfRange('options.maxHold'))
    await assert.rejects(mem.semaphore(key(), { limit: 1 }).acquire({ autoExtend: true, maxHold }), outOfRange('options.maxHold'))
  }
})

test('maxHold 0 without autoExtend is accepted (maxHold only bounds a heartbeat)', async () => {
  const lock = await mem.acquire(key(), { maxHold: 0 })
  assert.equal(lock.held, true)
  assert.equal(await lock.release(), true)
})

test('elect with ttl 1 is refused naming ttl and its minimum of 2, not autoExtend', () => {
  assert.throws(() => mem.elect(key(), { ttl: 1 }), (err) => {
    outOfRange('options.ttl')(err)
    assert.match(err.message, />= 2\b/)
    assert.ok(!err.message.includes('autoExtend'), err.message)
    return true
  })
})

test("request's bad name, options and callback are refused naming the argument, before any I/O", async () => {
  const fn = () => {}
  const cases = [
    [[42, fn], wrongType('name')],
    [['', fn], badValue("'name'")],
    [['n', 'exclusive', fn], wrongType('options')],
    [['n', { mode: 'read' }, fn], badValue("'options.mode'")],
    [['n', { ifAvailable: 'yes' }, fn], wrongType('options.ifAvailable')],
    [['n', { steal: 1 }, fn], wrongType('options.steal')],
    [['n', { signal: {} }, fn], wrongType('options.signal')],
    [['n', { ifAvailible: true }, fn], badValue("'options'")],
    [['n', {}], wrongType('callback')],
    [['n', {}, 'fn'], wrongType('callback')],
  ]
  for (const [args, expected] of cases) await assert.rejects(mem.request(...args), expected, JSON.stringify(args))
})

test("adopt's bad key and options are refused naming the argument, before any I/O", async () => {
  const cases = [
    [[42, { owner: 'o' }], wrongType('key')],
    [['k'], wrongType('options')],
    [['k', 'owner'], wrongType('options')],
    [['k', {}], wrongType('options.owner')],
    [['k', { owner: 7 }], wrongType('options.owner')],
    [['k', { owner: '' }], badValue("'options.owner'")],
    [['k', { owner: '\ud800' }], badValue("'options.owner'")],
    [['k', { owner: 'o', ttl: 0 }], outOfRange('options.ttl')],
    [['k', { owner: 'o', autoExtend: 'yes' }], wrongType('options.autoExtend')],
    [['k', { owner: 'o', onLost: 'log' }], wrongType('options.onLost')],
    [['k', { owner: 'o', wait: 1 }], badValue("'options'")],
  ]
  for (const [args, expected] of cases) await assert.rejects(mem.adopt(...args), expected, JSON.stringify(args))
  await assert.rejects(mem.semaphore(key(), { limit: 2 }).adopt({ owner: 'o', maxHold: -1 }), outOfRange('options.maxHold'))
  await assert.rejects(mem.readWriteLock(key()).adopt({ owner: 'o', extendEvery: 'often' }), wrongType('options.extendEvery'))
})
