'use strict'
// The node-redlock faces (`deadbolt/redlock`, `deadbolt/redlock/v4`), black-box: the bugs of
// node-redlock 5.0.0-beta.2 and 4.2.0 that the faces fix (docs/redlock.md), the clients they
// take, and what they never show. Against the shared Redis, every key under a random prefix.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { EventEmitter, once } = require('node:events')
const { inspect } = require('node:util')
const Redis = require('ioredis')
const { default: Redlock, ExecutionError, ResourceLockedError } = require('../redlock')
const RedlockV4 = require('../redlock/v4')
const { REDIS_URL, needRedis, prefix, redisRaw, closeRaw, eventually } = require('./helpers')
const { startRedisCluster } = require('./fixtures/redis-server')

after(closeRaw)

/** For the tests of a hang the original has: the hang fails the test instead of stalling the run. */
const HANG = { timeout: 30_000 }

/** An ioredis client for a Redlock under test, quit after the test. */
function client(t) {
  const c = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 })
  t.after(() => c.quit())
  return c
}

/** Resolves once `redlock` has heard `n` votes against (its `error` events) from now on. */
function votesAgainst(redlock, n) {
  return new Promise((resolve) => {
    let seen = 0
    const on = () => {
      if (++seen >= n) {
        redlock.off('error', on)
        resolve()
      }
    }
    redlock.on('error', on)
  })
}

test('a lock acquired after retries expires a duration after the attempt that won it, not after the first attempt', async (t) => {
  if (!(await needRedis(t))) return
  const c = client(t)
  const redlock = new Redlock([c], { retryCount: -1, retryDelay: 20, retryJitter: 0 })
  const key = prefix('redlock') + 'r'
  const first = await redlock.acquire([key], 60_000)
  const duration = 500
  const waiting = redlock.acquire([key], duration)
  // Two refusals: the second acquisition has been retrying for a while.
  await votesAgainst(redlock, 2)
  const freedAt = Date.now()
  await first.release()
  const second = await waiting
  const drift = Math.round(0.01 * duration) + 2
  assert.ok(second.expiration >= freedAt + duration - drift, `expiration ${second.expiration - freedAt} ms after the release`)
  await second.release()
})

test('using() keeps extending a lock whose acquisition retried for longer than its duration', async (t) => {
  if (!(await needRedis(t))) return
  const c = client(t)
  const redlock = new Redlock([c], { retryCount: -1, retryDelay: 20, retryJitter: 0 })
  const key = prefix('redlock') + 'u'
  const duration = 300
  const holder = await redlock.acquire([key], 60_000)
  const extended = new EventEmitter()
  let extensions = 0
  const extend = redlock.extend.bind(redlock)
  redlock.extend = async (...args) => {
    const lock = await extend(...args)
    extensions++
    extended.emit('extended')
    return lock
  }
  // Held beyond the duration: the waiting using() retries for longer than it.
  const refusals = votesAgainst(redlock, 20)
  const result = redlock.using([key], duration, { automaticExtensionThreshold: 100 }, async (signal) => {
    while (extensions < 2 && !signal.aborted) {
      await Promise.race([once(extended, 'extended'), once(signal, 'abort')])
    }
    return signal.aborted
  })
  await refusals
  await holder.release()
  assert.equal(await result, false, 'the signal aborted')
  assert.equal(await redisRaw().exists(key), 0)
})

test('using() aborts its signal once the lock is taken away, even with retryCount -1', HANG, async (t) => {
  if (!(await needRedis(t))) return
  const c = client(t)
  const redlock = new Redlock([c], { retryCount: -1, retryDelay: 20, retryJitter: 0 })
  const key = prefix('redlock') + 'a'
  const reason = await redlock.using([key], 300, { automaticExtensionThreshold: 100 }, async (signal) => {
    await redisRaw().set(key, 'someone else', 'PX', 60_000)
    if (!signal.aborted) await once(signal, 'abort')
    return signal.error
  })
  assert.ok(reason instanceof ExecutionError)
  assert.equal(reason.code, 'ERR_LOCK_EXTEND')
  assert.equal(await redisRaw().get(key), 'someone else', 'the other holder keeps its lock')
})

test('using() settles with the routine\'s outcome after an abort instead of waiting on release retries', async (t) => {
  if (!(await needRedis(t))) return
  const c = client(t)
  const redlock = new Redlock([c], { retryCount: 3, retryDelay: 20, retryJitter: 0 })
  const key = prefix('redlock') + 's'
  await assert.rejects(
    redlock.using([key], 300, { automaticExtensionThreshold: 100 }, async (signal) => {
      await redisRaw().del(key)
      if (!signal.aborted) await once(signal, 'abort')
      throw new Error('routine gave up')
    }),
    { message: 'routine gave up' },
  )
})

test('releasing an expired lock with retryCount -1 rejects with an ExecutionError instead of retrying forever', HANG, async (t) => {
  if (!(await needRedis(t))) return
  const c = client(t)
  const redlock = new Redlock([c], { retryCount: -1, retryDelay: 20, retryJitter: 0 })
  const key = prefix('redlock') + 'e'
  const lock = await redlock.acquire([key], 60_000)
  await redisRaw().del(key)
  await assert.rejects(lock.release(), (err) => {
    assert.ok(err instanceof ExecutionError)
    assert.equal(err.code, 'ERR_LOCK_RELEASE')
    assert.equal(err.attempts.length, 1)
    return true
  })
})

test('two clients that split one for and one against refuse the lock instead of hanging', HANG, async (t) => {
  if (!(await needRedis(t))) return
  const a = client(t)
  const b = new Redis(REDIS_URL, { maxRetriesPerRequest: 1, db: 1 })
  const key = prefix('redlock') + 'split'
  t.after(async () => {
    await b.del(key)
    await b.quit()
  })
  await b.set(key, 'someone else', 'PX', 60_000)
  const redlock = new Redlock([a, b], { retryCount: 0 })
  await assert.rejects(redlock.acquire([key], 10_000), (err) => {
    assert.ok(err instanceof ExecutionError)
    assert.equal(err.code, 'ERR_LOCK_ACQUISITION')
    return true
  })
  assert.equal(await a.exists(key), 0, 'the partial grant was given back')
})

test('a refused acquisition reports each server\'s vote against as a ResourceLockedError', async (t) => {
  if (!(await needRedis(t))) return
  const c = client(t)
  const redlock = new Redlock([c], { retryCount: 1, retryDelay: 10, retryJitter: 0 })
  const key = prefix('redlock') + 'v'
  const held = await redlock.acquire([key], 60_000)
  const err = await redlock.acquire([key], 1000).then(() => null, (e) => e)
  assert.ok(err instanceof ExecutionError)
  assert.equal(err.attempts.length, 2)
  for (const stats of await Promise.all(err.attempts)) {
    assert.deepEqual([stats.membershipSize, stats.quorumSize, stats.votesFor.size], [1, 1, 0])
    const [vote] = stats.votesAgainst.values()
    assert.ok(vote instanceof ResourceLockedError)
    assert.equal(vote.code, 'ERR_LOCK_RESOURCE_LOCKED')
  }
  await held.release()
})

test('a duration that is not an integer is refused with ERR_OUT_OF_RANGE before any I/O', async () => {
  const redlock = new Redlock(['redis://127.0.0.1:1'])
  await assert.rejects(redlock.acquire(['k'], 1.5), { code: 'ERR_OUT_OF_RANGE', message: 'Duration must be an integer value in milliseconds.' })
  await redlock.quit().catch(() => {})
})

test('Redlock takes redis:// URLs and quit() closes the clients it opened', async (t) => {
  if (!(await needRedis(t))) return
  const redlock = new Redlock([REDIS_URL])
  const key = prefix('redlock') + 'url'
  const lock = await redlock.acquire([key], 10_000)
  assert.equal(await redisRaw().get(key), lock.value)
  await lock.release()
  const [opened] = redlock.clients
  const ended = once(opened, 'end')
  await redlock.quit()
  await ended
  assert.equal(opened.status, 'end')
})

test('Redlock takes a node-redis 5 client', async (t) => {
  if (!(await needRedis(t))) return
  const { createClient } = require('redis')
  const c = createClient({ url: REDIS_URL })
  await c.connect()
  const redlock = new Redlock([c])
  const key = prefix('redlock') + 'nr'
  const lock = await redlock.acquire([key], 10_000)
  assert.equal(await redisRaw().get(key), lock.value)
  const extended = await lock.extend(20_000)
  assert.ok(await redisRaw().pttl(key) > 10_000)
  await extended.release()
  assert.equal(await redisRaw().exists(key), 0)
  await redlock.quit()
})

test('Redlock takes a node-redis 4 client', async (t) => {
  if (!(await needRedis(t))) return
  const { createClient } = require('redis4')
  const c = createClient({ url: REDIS_URL })
  await c.connect()
  const redlock = new Redlock([c])
  const key = prefix('redlock') + 'nr4'
  const lock = await redlock.acquire([key], 10_000)
  assert.equal(await redisRaw().get(key), lock.value)
  await lock.release()
  assert.equal(await redisRaw().exists(key), 0)
  await redlock.quit()
})

test('Redlock takes a node_redis 3 client, callbacks and all', async (t) => {
  if (!(await needRedis(t))) return
  const c = require('redis3').createClient(REDIS_URL)
  const redlock = new Redlock([c])
  const key = prefix('redlock') + 'nr3'
  const lock = await redlock.acquire([key], 10_000)
  assert.equal(await redisRaw().get(key), lock.value)
  await lock.release()
  assert.equal(await redisRaw().exists(key), 0)
  await redlock.quit()
})

test('Redlock takes a node-redis 5 cluster client, each lock on its key\'s node', async (t) => {
  const cluster = await startRedisCluster(t, 3)
  if (!cluster) return
  t.after(() => cluster.stop())
  const { createCluster } = require('redis')
  const c = createCluster({ rootNodes: [{ url: cluster.urls[0] }] })
  await c.connect()
  const redlock = new Redlock([c])
  const keys = ['{a}x', '{b}x', '{c}x'].map((k) => prefix('redlock') + k)
  const locks = await Promise.all(keys.map((k) => redlock.acquire([k], 10_000)))
  for (const [i, k] of keys.entries()) assert.equal(await c.get(k), locks[i].value)
  await Promise.all(locks.map((l) => l.release()))
  for (const k of keys) assert.equal(await c.exists(k), 0)
  await c.close()
})

test('util.inspect of a Redlock shows no client options, so no password', () => {
  const c = new Redis({ lazyConnect: true, password: 'hunter2-secret' })
  for (const r of [new Redlock([c]), new RedlockV4([c])]) {
    assert.doesNotMatch(inspect(r, { depth: 10, showHidden: false }), /hunter2/)
  }
})

test('v4: lockWithOptions with retryCount 0 makes a single attempt', async (t) => {
  if (!(await needRedis(t))) return
  const c = client(t)
  const redlock = new RedlockV4([c], { retryCount: 5, retryDelay: 10, retryJitter: 0 })
  const key = prefix('redlock') + 'v4'
  const held = await redlock.lock(key, 60_000)
  await assert.rejects(redlock.lockWithOptions(key, 1000, { retryCount: 0 }), (err) => {
    assert.ok(err instanceof RedlockV4.LockError)
    assert.equal(err.attempts, 1)
    assert.equal(err.code, 'ERR_LOCK_ACQUISITION')
    return true
  })
  await held.unlock()
})

test('v4: extending a lock that was taken over rejects after one attempt, leaving the new holder alone', HANG, async (t) => {
  if (!(await needRedis(t))) return
  const c = client(t)
  const redlock = new RedlockV4([c], { retryCount: -1, retryDelay: 10, retryJitter: 0 })
  const key = prefix('redlock') + 'v4x'
  const lock = await redlock.lock(key, 60_000)
  await redisRaw().set(key, 'someone else', 'PX', 60_000)
  await assert.rejects(lock.extend(1000), (err) => {
    assert.equal(err.code, 'ERR_LOCK_EXTEND')
    assert.equal(err.attempts, 1)
    return true
  })
  assert.equal(await redisRaw().get(key), 'someone else')
  await redisRaw().del(key)
})

test('a retryCount below -1 or a negative retryDelay is refused with ERR_OUT_OF_RANGE', async () => {
  const c = new Redis({ lazyConnect: true })
  assert.throws(() => new Redlock([c], { retryCount: -2 }), { code: 'ERR_OUT_OF_RANGE' })
  assert.throws(() => new Redlock([c], { retryDelay: -1 }), { code: 'ERR_OUT_OF_RANGE' })
  await assert.rejects(new Redlock([c]).acquire(['k'], 1000, { retryCount: 1.5 }), { code: 'ERR_OUT_OF_RANGE' })
})

/** Counts the socket writes of an ioredis client from now on (each is one system call). */
async function countWrites(c) {
  await c.ping()
  const stream = c.stream
  const counts = { writes: 0, chunks: 0 }
  const write = stream._write
  const writev = stream._writev
  stream._write = function (...args) {
    counts.writes++
    counts.chunks++
    return write.apply(this, args)
  }
  stream._writev = function (chunks, cb) {
    counts.writes++
    counts.chunks += chunks.length
    return writev.call(this, chunks, cb)
  }
  return counts
}

test('locks taken in the same tick on one ioredis client leave in one socket write', async (t) => {
  if (!(await needRedis(t))) return
  const c = client(t)
  const redlock = new Redlock([c], { retryCount: 0 })
  const counts = await countWrites(c)
  const p = prefix('redlock')
  const locks = await Promise.all(Array.from({ length: 20 }, (_, i) => redlock.acquire([`${p}w${i}`], 60_000)))
  assert.deepEqual(counts, { writes: 1, chunks: 20 })
  await Promise.all(locks.map((l) => l.release()))
  assert.deepEqual(counts, { writes: 2, chunks: 40 })
})

test('every lock gets a value of its own, 16 random bytes in hex', async (t) => {
  if (!(await needRedis(t))) return
  const c = client(t)
  const redlock = new Redlock([c], { retryCount: 0 })
  const p = prefix('redlock')
  // More than one batch of values drawn from the CSPRNG.
  const locks = await Promise.all(Array.from({ length: 200 }, (_, i) => redlock.acquire([`${p}v${i}`], 60_000)))
  const values = new Set(locks.map((l) => l.value))
  assert.equal(values.size, 200)
  for (const v of values) assert.match(v, /^[0-9a-f]{32}$/)
  assert.equal(await redisRaw().get(`${p}v7`), locks[7].value)
  await Promise.all(locks.map((l) => l.release()))
})

test('a release hands the lock to an acquisition of the same Redlock waiting on it, not to its next retry', HANG, async (t) => {
  if (!(await needRedis(t))) return
  const c = client(t)
  // Without the wake-up the waiter would ask again only a minute later (past the test's guard).
  // (One retry at most, so that a failure leaves no timer behind for long.)
  const redlock = new Redlock([c], { retryCount: 1, retryDelay: 60_000, retryJitter: 0 })
  const key = prefix('redlock') + 'wake'
  const first = await redlock.acquire([key], 60_000)
  const waiting = redlock.acquire([key], 60_000)
  // Refused once, the waiter pauses.
  await votesAgainst(redlock, 1)
  await eventually(() => redlock._waiting.queues.has(key), 20_000, 'the waiter to pause')
  await first.release()
  // The waiter's attempt followed the release on the connection: the releaser asking again
  // at once finds the lock taken.
  await assert.rejects(redlock.acquire([key], 60_000, { retryCount: 0 }), ExecutionError)
  const second = await waiting
  assert.equal(await redisRaw().get(key), second.value)
  assert.equal(second.attempts.length, 2)
  await second.release()
})

test('v4: an unlock hands the lock to a lock() of the same Redlock waiting on it, not to its next retry', HANG, async (t) => {
  if (!(await needRedis(t))) return
  const c = client(t)
  const redlock = new RedlockV4([c], { retryCount: 1, retryDelay: 60_000, retryJitter: 0 })
  const key = prefix('redlock') + 'v4wake'
  const first = await redlock.lock(key, 60_000)
  const waiting = redlock.lock(key, 60_000)
  // v4 emits nothing on a refusal: wait until the waiter's first attempt was refused and given
  // back, and it is pausing.
  await eventually(() => redlock._waiting.queues.has(key), 20_000, 'the waiter to pause')
  await first.unlock()
  await assert.rejects(redlock.lockWithOptions(key, 60_000, { retryCount: 0 }), { code: 'ERR_LOCK_ACQUISITION' })
  const second = await waiting
  assert.equal(await redisRaw().get(key), second.value)
  assert.equal(second.attempts, 2)
  await second.unlock()
})
