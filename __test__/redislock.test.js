'use strict'
// The redislock 1.3 face, black-box: the behaviour a redislock user relies on.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const path = require('node:path')
const deadbolt = require('..')
const { REDIS_URL, needRedis, prefix, redisRaw, closeRaw, sleep, blackhole, eventually } = require('./helpers')
const { startRedis } = require('./fixtures/redis-server')

const { createLock, setDefaults, getAcquiredLocks, LockAcquisitionError, LockReleaseError, LockExtendError } = deadbolt

after(closeRaw)

/** What a held lock stores under its key, read as bytes by a plain client. */
const storedId = (lock, redis = redisRaw()) => redis.getBuffer(lock._key)
/** What redislock stores: the bare `_id`, byte for byte, in every mode. */
const valueOf = (lock) => Buffer.from(lock._id)

test('a new lock has redislock defaults: timeout 10000, retries 0, delay 50, and no fencing', () => {
  const lock = createLock(REDIS_URL)
  assert.equal(lock.timeout, 10000)
  assert.equal(lock.retries, 0)
  assert.equal(lock.delay, 50)
  assert.equal(lock.fencing, false)
  assert.equal(lock.fencingToken, null)
  assert.equal(lock._locked, false)
  assert.equal(lock._key, null)
  assert.equal(typeof lock._id, 'string')
})

test('options given to createLock override the defaults', () => {
  const lock = createLock(REDIS_URL, { timeout: 2000, retries: 3, delay: 10, ignored: 1 })
  assert.deepEqual([lock.timeout, lock.retries, lock.delay, lock.ignored], [2000, 3, 10, undefined])
})

test('setDefaults changes the defaults of locks created afterwards only', () => {
  const before = createLock(REDIS_URL)
  setDefaults({ timeout: '5000', retries: 2, delay: null })
  try {
    const lock = createLock(REDIS_URL)
    assert.deepEqual([lock.timeout, lock.retries, lock.delay], [5000, 2, 50])
    assert.equal(before.timeout, 10000)
  } finally {
    setDefaults({ timeout: 10000, retries: 0, delay: 50 })
  }
})

test('with fencing: true acquire stores the bare lock id under the key with the timeout as its ttl', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('rl') + 'k'
  const lock = createLock(REDIS_URL, { timeout: 3000, fencing: true })
  const result = await lock.acquire(key)
  assert.equal(result, undefined)
  assert.equal(lock._locked, true)
  assert.equal(lock._key, key)
  assert.equal(await redisRaw().get(key), lock._id)
  const pttl = await redisRaw().pttl(key)
  assert.ok(pttl > 2000 && pttl <= 3000, `pttl ${pttl}`)
  await lock.release()
})

test('acquire of a key held elsewhere rejects with LockAcquisitionError naming the key', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('rl') + 'k'
  await redisRaw().set(key, 'someone-else', 'PX', 5000)
  const lock = createLock(REDIS_URL)
  await assert.rejects(lock.acquire(key), (err) => {
    assert.ok(err instanceof LockAcquisitionError)
    assert.ok(err instanceof Error)
    assert.equal(err.name, 'LockAcquisitionError')
    assert.equal(err.code, 'ERR_LOCK_ACQUISITION')
    assert.equal(err.message, `Could not acquire lock on "${key}"`)
    return true
  })
  assert.equal(lock._locked, false)
  assert.equal(await redisRaw().get(key), 'someone-else')
})

test('acquiring a lock object that is already held rejects with "Lock already held"', async (t) => {
  if (!(await needRedis(t))) return
  const lock = createLock(REDIS_URL)
  await lock.acquire(prefix('rl') + 'a')
  await assert.rejects(lock.acquire(prefix('rl') + 'b'), { name: 'LockAcquisitionError', message: 'Lock already held' })
  await lock.release()
})

test('release deletes the key and resets the lock state', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('rl') + 'k'
  const lock = createLock(REDIS_URL)
  await lock.acquire(key)
  assert.equal(await lock.release(), undefined)
  assert.equal(await redisRaw().exists(key), 0)
  assert.equal(lock._locked, false)
  assert.equal(lock._key, null)
})

test('release of a lock never acquired rejects with "Lock has not been acquired"', async () => {
  const lock = createLock(REDIS_URL)
  await assert.rejects(lock.release(), (err) => err instanceof LockReleaseError && err.message === 'Lock has not been acquired' && err.code === 'ERR_LOCK_RELEASE')
})

test('release after the lock expired rejects with "had expired" and resets the state', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('rl') + 'k'
  const lock = createLock(REDIS_URL, { timeout: 50 })
  await lock.acquire(key)
  await sleep(120)
  await assert.rejects(lock.release(), { name: 'LockReleaseError', message: `Lock on "${key}" had expired` })
  assert.equal(lock._locked, false)
  assert.equal(lock._key, null)
})

test('release never deletes a key another owner took after expiry', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('rl') + 'k'
  const lock = createLock(REDIS_URL, { timeout: 50 })
  await lock.acquire(key)
  await sleep(100)
  await redisRaw().set(key, 'new-owner', 'PX', 5000)
  await assert.rejects(lock.release(), LockReleaseError)
  assert.equal(await redisRaw().get(key), 'new-owner')
})

test('extend sets the remaining ttl to the given number of ms', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('rl') + 'k'
  const lock = createLock(REDIS_URL, { timeout: 1000 })
  await lock.acquire(key)
  assert.equal(await lock.extend(20000), undefined)
  const pttl = await redisRaw().pttl(key)
  assert.ok(pttl > 19000 && pttl <= 20000, `pttl ${pttl}`)
  await lock.release()
})

test('extend of a lock never acquired rejects with "Lock has not been acquired"', async () => {
  await assert.rejects(createLock(REDIS_URL).extend(1000), (err) => err instanceof LockExtendError && err.message === 'Lock has not been acquired' && err.code === 'ERR_LOCK_EXTEND')
})

test('extend after expiry rejects with "had expired" and resets the state', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('rl') + 'k'
  const lock = createLock(REDIS_URL, { timeout: 50 })
  await lock.acquire(key)
  await sleep(120)
  await assert.rejects(lock.extend(1000), { name: 'LockExtendError', message: `Lock on "${key}" had expired` })
  assert.equal(lock._locked, false)
  assert.deepEqual(getAcquiredLocks().includes(lock), false)
})

test('a lock object can be acquired again after release', async (t) => {
  if (!(await needRedis(t))) return
  const lock = createLock(REDIS_URL)
  const key = prefix('rl') + 'k'
  await lock.acquire(key)
  await lock.release()
  await lock.acquire(key)
  assert.deepEqual(await storedId(lock), valueOf(lock))
  await lock.release()
})

test('retries with a delay acquire the lock once the holder releases it', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('rl') + 'k'
  const holder = createLock(REDIS_URL)
  await holder.acquire(key)
  const waiter = createLock(REDIS_URL, { retries: 50, delay: 20 })
  const acquired = waiter.acquire(key)
  await sleep(60)
  assert.equal(waiter._locked, false)
  await holder.release()
  await acquired
  assert.deepEqual(await storedId(waiter), valueOf(waiter))
  await waiter.release()
})

test('retries run out with LockAcquisitionError while the key stays held', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('rl') + 'k'
  await redisRaw().set(key, 'other', 'PX', 10000)
  const lock = createLock(REDIS_URL, { retries: 3, delay: 10 })
  await assert.rejects(lock.acquire(key), { message: `Could not acquire lock on "${key}"` })
})

test('retries -1 keeps trying until the lock is free', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('rl') + 'k'
  await redisRaw().set(key, 'other', 'PX', 400)
  const lock = createLock(REDIS_URL, { retries: -1, delay: 10 })
  await lock.acquire(key)
  assert.deepEqual(await storedId(lock), valueOf(lock))
  await lock.release()
})

test('callbacks receive null on success and the error on failure', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('rl') + 'k'
  const a = createLock(REDIS_URL)
  const b = createLock(REDIS_URL)
  await new Promise((resolve, reject) => a.acquire(key, (err) => (err ? reject(err) : resolve())))
  const err = await new Promise((resolve) => b.acquire(key, resolve))
  assert.ok(err instanceof LockAcquisitionError)
  await new Promise((resolve, reject) => a.release((e) => (e ? reject(e) : resolve())))
  const relErr = await new Promise((resolve) => a.release(resolve))
  assert.ok(relErr instanceof LockReleaseError)
})

test('a filtered catch with an error class handles only matching errors', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('rl') + 'k'
  await redisRaw().set(key, 'other', 'PX', 5000)
  let handled = null
  await createLock(REDIS_URL).acquire(key).catch(LockAcquisitionError, (err) => { handled = err })
  assert.ok(handled instanceof LockAcquisitionError)
  // A non-matching class lets the error through instead of swallowing it.
  await assert.rejects(
    createLock(REDIS_URL).release().catch(LockAcquisitionError, () => 'swallowed'),
    LockReleaseError,
  )
})

test('nodeify passes the outcome to a node-style callback', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('rl') + 'k'
  const lock = createLock(REDIS_URL)
  const args = await new Promise((resolve) => lock.acquire(key).nodeify((...a) => resolve(a)))
  assert.equal(args[0], null)
  const err = await new Promise((resolve) => createLock(REDIS_URL).acquire(key).nodeify(resolve))
  assert.ok(err instanceof LockAcquisitionError)
  await lock.release()
})

test('getAcquiredLocks lists held locks and forgets released ones', async (t) => {
  if (!(await needRedis(t))) return
  const lock = createLock(REDIS_URL)
  await lock.acquire(prefix('rl') + 'k')
  assert.ok(getAcquiredLocks().includes(lock))
  await lock.release()
  assert.ok(!getAcquiredLocks().includes(lock))
})

test('the error classes work with new, instanceof, name and a stable code', () => {
  for (const [Class, code] of [[LockAcquisitionError, 'ERR_LOCK_ACQUISITION'], [LockReleaseError, 'ERR_LOCK_RELEASE'], [LockExtendError, 'ERR_LOCK_EXTEND']]) {
    const err = new Class('boom')
    assert.ok(err instanceof Error)
    assert.ok(err instanceof Class)
    assert.equal(err.name, Class.name)
    assert.equal(err.message, 'boom')
    assert.equal(err.code, code)
    assert.match(err.stack, /boom/)
  }
})

test('with fencing: true every acquisition gets a fencing token that increases per key', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('rl') + 'k'
  const lock = createLock(REDIS_URL, { fencing: true })
  const tokens = []
  for (let i = 0; i < 5; i++) {
    await lock.acquire(key)
    tokens.push(lock.fencingToken)
    await lock.release()
  }
  assert.equal(typeof tokens[0], 'bigint')
  for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i] > tokens[i - 1])
  // No counter per name is left behind (the 0.1 layout kept `{key}:fence` forever).
  assert.equal(await redisRaw().exists(`{${key}}:fence`), 0)
})

test('by default the key holds the bare id, as redislock\'s, and the lock has no token', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('rl') + 'k'
  const lock = createLock(REDIS_URL, { timeout: 3000 })
  assert.equal(lock.fencing, false)
  await lock.acquire(key)
  assert.equal(lock.fencingToken, null)
  assert.deepEqual(await redisRaw().getBuffer(key), Buffer.from(lock._id))
  assert.equal(await redisRaw().get(key), lock._id)
  const pttl = await redisRaw().pttl(key)
  assert.ok(pttl > 2000 && pttl <= 3000, `pttl ${pttl}`)
  // Held: another lock object is refused; extend and release still find it.
  await assert.rejects(createLock(REDIS_URL).acquire(key), LockAcquisitionError)
  await lock.extend(5000)
  assert.ok((await redisRaw().pttl(key)) > 4000)
  await lock.release()
  assert.equal(await redisRaw().exists(key), 0)
})

// Every mode the face has: its default (no token), `fencing: true` given to createLock, and
// the same through setDefaults.
const modes = {
  'by default': (options) => createLock(REDIS_URL, options),
  'with fencing: true': (options) => createLock(REDIS_URL, { ...options, fencing: true }),
  'after setDefaults({ fencing: true })': (options) => {
    setDefaults({ fencing: true })
    try {
      return createLock(REDIS_URL, options)
    } finally {
      setDefaults({ fencing: false })
    }
  },
}
for (const [mode, make] of Object.entries(modes)) {
  test(`${mode} a plain client reads the bare id under the key, acquired, refused, extended and taken over by a waiter`, async (t) => {
    if (!(await needRedis(t))) return
    const key = prefix('rl') + 'bare'
    const raw = () => redisRaw().getBuffer(key)
    const holder = make({ timeout: 5000 })
    await holder.acquire(key)
    assert.deepEqual(await raw(), Buffer.from(holder._id), 'acquired')
    await assert.rejects(make().acquire(key), LockAcquisitionError)
    assert.deepEqual(await raw(), Buffer.from(holder._id), 'after a refused acquisition')
    await holder.extend(8000)
    assert.deepEqual(await raw(), Buffer.from(holder._id), 'extended')
    // A lock of this process retrying meanwhile takes it over (the engine may hand it on).
    const waiter = make({ retries: -1, delay: 5 })
    const waited = waiter.acquire(key)
    await holder.release()
    await waited
    assert.deepEqual(await raw(), Buffer.from(waiter._id), 'taken over by the waiter')
    await waiter.release()
    assert.equal(await raw(), null)
  })
}

test('by default an uncontended acquisition is redislock\'s own command, one top-level SET key id PX timeout NX', async (t) => {
  if (!(await needRedis(t))) return
  // A server of its own, so that its command counts and what MONITOR sees are this test's alone.
  const server = await startRedis()
  const IORedis = require('ioredis')
  const raw = new IORedis(server.port)
  const watcher = new IORedis(server.port)
  const monitor = await watcher.monitor()
  const seen = []
  monitor.on('monitor', (time, args) => seen.push(args))
  t.after(async () => {
    monitor.disconnect()
    watcher.disconnect()
    raw.disconnect()
    await server.kill()
  })
  const calls = async () => {
    const stats = await raw.info('commandstats')
    const of = (cmd) => Number((new RegExp(`cmdstat_${cmd}:calls=(\\d+)`).exec(stats) || [0, 0])[1])
    return { set: of('set'), evalsha: of('evalsha'), incr: of('incr') }
  }
  const lock = createLock(server.url, { timeout: 3000 })
  const key = prefix('rl') + 'k'
  const before = await calls()
  await lock.acquire(key)
  const after = await calls()
  assert.deepEqual([after.set - before.set, after.evalsha - before.evalsha, after.incr - before.incr], [1, 0, 0])
  await eventually(() => seen.some((args) => args.includes(key)), 5000, 'MONITOR to show the SET')
  assert.deepEqual(seen.filter((args) => args.includes(key)), [['SET', key, lock._id, 'PX', '3000', 'NX']])
  await lock.release()
})

test('setDefaults({ fencing: true }) makes later locks draw tokens and refuses a non-boolean', async (t) => {
  if (!(await needRedis(t))) return
  setDefaults({ fencing: true })
  let lock
  try {
    lock = createLock(REDIS_URL)
  } finally {
    setDefaults({ fencing: false })
  }
  assert.equal(lock.fencing, true)
  await lock.acquire(prefix('rl') + 'k')
  assert.equal(typeof lock.fencingToken, 'bigint')
  await lock.release()
  assert.throws(() => setDefaults({ fencing: 'true', timeout: 1234 }), (err) => err instanceof TypeError && err.code === 'ERR_INVALID_ARG_TYPE' && err.message.includes('"fencing"'))
  const after = createLock(REDIS_URL)
  assert.deepEqual([after.fencing, after.timeout], [false, 10000], 'a refused setDefaults changes nothing')
})

test('bad keys are refused with a TypeError or RangeError before any I/O', async () => {
  // The client points at a port nothing listens on: an attempt at I/O would fail differently.
  const lock = createLock('redis://127.0.0.1:1')
  await assert.rejects(lock.acquire(), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })
  await assert.rejects(lock.acquire(42), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })
  await assert.rejects(lock.acquire(''), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE' })
  await assert.rejects(lock.acquire('x'.repeat(1025)), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' })
  await assert.rejects(lock.acquire('é'.repeat(513)), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' })
})

test('bad options are refused with a RangeError or TypeError naming the option', async () => {
  for (const [opts, name] of [[{ timeout: 0 }, 'timeout'], [{ timeout: 1.5 }, 'timeout'], [{ timeout: NaN }, 'timeout'], [{ timeout: -5 }, 'timeout'], [{ retries: -2 }, 'retries'], [{ retries: 0.5 }, 'retries'], [{ delay: -1 }, 'delay']]) {
    assert.throws(() => createLock(REDIS_URL, opts), (err) => err instanceof RangeError && err.code === 'ERR_OUT_OF_RANGE' && err.message.includes(`"${name}"`))
  }
  assert.throws(() => createLock(REDIS_URL, { timeout: '100' }), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })
  assert.throws(() => createLock(REDIS_URL, { fencing: 0 }), (err) => err instanceof TypeError && err.code === 'ERR_INVALID_ARG_TYPE' && err.message.includes('"fencing"'))
  const lock = createLock(REDIS_URL)
  await assert.rejects(lock.extend(NaN), RangeError)
  await assert.rejects(lock.extend(2.5), RangeError)
})

test('a client that is none of the supported kinds is refused with a TypeError', () => {
  for (const bad of [undefined, null, 42, 'http://localhost', {}, { foo: 1 }]) {
    assert.throws(() => createLock(bad), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })
  }
})

test('an unreachable Redis gives a LockAcquisitionError whose cause says why', async () => {
  const lock = createLock('redis://127.0.0.1:1', { retries: -1 })
  await assert.rejects(lock.acquire(prefix('rl') + 'k'), (err) => {
    assert.ok(err instanceof LockAcquisitionError)
    assert.ok(err.cause, 'has a cause')
    assert.equal(err.cause.code, 'ERR_LOCK_BACKEND')
    assert.match(err.cause.cause.message, /refused|connect/i)
    return true
  })
})

test('a Redis that accepts but never answers fails the acquisition instead of hanging', async () => {
  const hole = await blackhole()
  try {
    const lock = createLock(`redis://127.0.0.1:${hole.port}`)
    await assert.rejects(lock.acquire(prefix('rl') + 'k'), LockAcquisitionError)
  } finally {
    hole.close()
  }
})

test('every supported client kind locks the same server and database', async (t) => {
  if (!(await needRedis(t))) return
  const redis3 = require('redis3')
  const { createClient: createClient4 } = require('redis4')
  const { createClient: createClient5 } = require('redis')
  const IORedis = require('ioredis')
  const c3 = redis3.createClient({ host: '127.0.0.1', port: 6379, db: 3 })
  const c4 = createClient4({ url: 'redis://127.0.0.1:6379/3' })
  const c5 = createClient5({ socket: { host: '127.0.0.1', port: 6379 }, database: 3 })
  const io = new IORedis({ host: '127.0.0.1', port: 6379, db: 3, lazyConnect: true })
  const kinds = {
    'node_redis v3': c3,
    'node-redis v4': c4,
    'node-redis v5': c5,
    ioredis: io,
    'a URL': 'redis://127.0.0.1:6379/3',
    'an options object': { host: '127.0.0.1', port: 6379, db: 3 },
  }
  const db3 = new IORedis({ host: '127.0.0.1', port: 6379, db: 3 })
  try {
    for (const [kind, client] of Object.entries(kinds)) {
      const key = prefix('kind') + kind
      const lock = createLock(client)
      await lock.acquire(key)
      assert.deepEqual(await storedId(lock, db3), valueOf(lock), kind)
      assert.equal(await redisRaw().get(key), null, `${kind} must not write to db 0`)
      await lock.release()
    }
    // The user's client is never patched.
    assert.equal(c3.delifequal, undefined)
    assert.equal(typeof io.delifequal, 'undefined')
  } finally {
    c3.quit()
    db3.disconnect()
    io.disconnect()
  }
})

for (const fencing of [false, true]) {
  test(`a redislock process and a deadbolt process exclude each other on one key${fencing ? ' with fencing: true' : ''}`, async (t) => {
    if (!(await needRedis(t))) return
    const key = prefix('interop') + 'k'
    // The child runs the real redislock 1.3.0 on node_redis v3 and reports each step.
    const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'redislock-holder.js'), key], { stdio: ['pipe', 'pipe', 'inherit'] })
    const lines = []
    let wake = null
    child.stdout.setEncoding('utf8')
    child.stdout.on('data', (d) => { lines.push(...d.trim().split('\n')); if (wake) wake() })
    const next = async (expected) => {
      while (!lines.includes(expected)) await new Promise((r) => { wake = r })
    }
    try {
      await next('acquired')
      const lock = createLock(REDIS_URL, { fencing })
      await assert.rejects(lock.acquire(key), LockAcquisitionError)
      child.stdin.write('release\n')
      await next('released')
      await lock.acquire(key)
      child.stdin.write('try\n')
      await next('refused')
      await lock.release()
      child.stdin.write('try\n')
      await next('acquired-again')
    } finally {
      child.stdin.end()
      await new Promise((r) => child.once('exit', r))
    }
  })
}

test('20 lock objects retrying forever on one key never overlap', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('mutex') + 'k'
  let inside = 0
  let maxInside = 0
  let entries = 0
  await Promise.all(Array.from({ length: 20 }, async () => {
    const lock = createLock(REDIS_URL, { retries: -1, delay: 5, timeout: 10000 })
    for (let i = 0; i < 5; i++) {
      await lock.acquire(key)
      inside++
      entries++
      maxInside = Math.max(maxInside, inside)
      await sleep(1)
      inside--
      await lock.release()
    }
  }))
  assert.equal(entries, 100)
  assert.equal(maxInside, 1)
})

test('a lock taken through the redislock face names no holder: its wire format stays the bare id', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('rl') + 'holder'
  const lock = createLock(REDIS_URL)
  await lock.acquire(key)
  const locks = await deadbolt.connect(REDIS_URL, { name: 'modern' })
  try {
    const info = await locks.inspect(key)
    assert.equal(info.owner, lock._id)
    assert.equal(info.holder, null)
  } finally {
    await locks.close()
    await lock.release()
  }
})

test('the redislock face publishes its acquisitions on deadbolt:acquire', async (t) => {
  if (!(await needRedis(t))) return
  const dc = require('node:diagnostics_channel')
  const seen = []
  const handlers = { asyncEnd: (ctx) => seen.push([ctx.key, ctx.store, ctx.result]) }
  dc.tracingChannel('deadbolt:acquire').subscribe(handlers)
  t.after(() => dc.tracingChannel('deadbolt:acquire').unsubscribe(handlers))
  const key = prefix('rl') + 'observed'
  const lock = createLock(REDIS_URL)
  await lock.acquire(key)
  await lock.release()
  assert.deepEqual(seen, [[key, 'redis', 'granted']])
})
