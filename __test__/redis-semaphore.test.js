'use strict'
// deadbolt/redis-semaphore beside the real redis-semaphore 5.8.0: the same exports, processes
// of both excluding each other on the same keys (mixed fleets during a migration), node-redis
// clients, and the original's bugs the face fixes (docs/redis-semaphore.md).

const { test } = require('node:test')
const assert = require('node:assert/strict')
const Redis = require('ioredis')
const { createClient } = require('redis')
const original = require('redis-semaphore')
const face = require('../redis-semaphore')
const { LockLostError } = require('..')
const { needRedis, prefix, REDIS_URL, eventually } = require('./helpers')
const { startRedisServers } = require('./fixtures/redis-server')

/** A fresh ioredis client, closed after the test. */
function ioredis(t, url = REDIS_URL) {
  const client = new Redis(url)
  t.after(() => client.disconnect())
  return client
}

/** No retry: one attempt, for checking that a lock is refused. */
const once = { acquireAttemptsLimit: 1, refreshInterval: 0 }

/** A promise and its resolve function. */
function signal() {
  let resolve
  const promise = new Promise((r) => { resolve = r })
  return { promise, resolve }
}

/**
 * `client` whose next call of `method` waits for `gate.open()`; `gate.entered` resolves once
 * that call was made.
 */
function gated(client, method) {
  const entered = signal()
  const opened = signal()
  let armed = false
  const proxy = new Proxy(client, {
    get(target, prop) {
      const value = target[prop]
      if (prop === method && armed) {
        return (...args) => {
          armed = false
          entered.resolve()
          return opened.promise.then(() => value.apply(target, args))
        }
      }
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
  return { client: proxy, arm: () => { armed = true }, entered: entered.promise, open: opened.resolve }
}

test('deadbolt/redis-semaphore exports exactly redis-semaphore 5.8.0\'s names', () => {
  assert.equal(require('redis-semaphore/package.json').version, '5.8.0')
  assert.deepEqual(Object.keys(face).sort(), Object.keys(original).sort())
  assert.deepEqual(face.defaultTimeoutOptions, original.defaultTimeoutOptions)
})

test('a Mutex of the face and one of the original exclude each other on the same key', async (t) => {
  if (!(await needRedis(t))) return
  const client = ioredis(t)
  const key = prefix('rs-mutex')
  const theirs = new original.Mutex(client, key, { refreshInterval: 0 })
  await theirs.acquire()
  assert.equal(await new face.Mutex(client, key, once).tryAcquire(), false)
  await theirs.release()

  const ours = new face.Mutex(client, key)
  await ours.acquire()
  // The original's layout: `mutex:<key>` holding the identifier.
  assert.equal(await client.get(`mutex:${key}`), ours.identifier)
  assert.equal(await new original.Mutex(client, key, once).tryAcquire(), false)
  await ours.release()
  assert.equal(await client.get(`mutex:${key}`), null)
  const next = new original.Mutex(client, key, once)
  assert.equal(await next.tryAcquire(), true)
  await next.release()
})

test('a Semaphore\'s permits are shared by the face and the original', async (t) => {
  if (!(await needRedis(t))) return
  const client = ioredis(t)
  const key = prefix('rs-sem')
  const theirs = new original.Semaphore(client, key, 2, { refreshInterval: 0 })
  const ours = new face.Semaphore(client, key, 2)
  await theirs.acquire()
  await ours.acquire()
  assert.deepEqual((await client.zrange(`semaphore:${key}`, 0, -1)).sort(), [theirs.identifier, ours.identifier].sort())
  assert.equal(await new original.Semaphore(client, key, 2, once).tryAcquire(), false)
  assert.equal(await new face.Semaphore(client, key, 2, once).tryAcquire(), false)
  await theirs.release()
  const third = new face.Semaphore(client, key, 2, once)
  assert.equal(await third.tryAcquire(), true)
  await Promise.all([ours.release(), third.release()])
  assert.equal(await client.zcard(`semaphore:${key}`), 0)
})

test('a MultiSemaphore of the face counts the original\'s permits and takes <identifier>_<i> members', async (t) => {
  if (!(await needRedis(t))) return
  const client = ioredis(t)
  const key = prefix('rs-multi')
  const theirs = new original.MultiSemaphore(client, key, 3, 2, { refreshInterval: 0 })
  await theirs.acquire()
  assert.equal(await new face.MultiSemaphore(client, key, 3, 2, once).tryAcquire(), false)
  const ours = new face.MultiSemaphore(client, key, 3, 1)
  await ours.acquire()
  assert.equal(await new original.Semaphore(client, key, 3, once).tryAcquire(), false)
  assert.ok((await client.zrange(`semaphore:${key}`, 0, -1)).includes(`${ours.identifier}_0`))
  await theirs.release()
  const two = new original.MultiSemaphore(client, key, 3, 2, once)
  assert.equal(await two.tryAcquire(), true)
  await Promise.all([ours.release(), two.release()])
})

for (const [version, create] of [['5', createClient], ['4', require('redis4').createClient]]) {
  test(`a node-redis ${version} client works, and excludes the original on an ioredis client`, async (t) => {
    if (!(await needRedis(t))) return
    const nodeRedis = create({ url: REDIS_URL })
    await nodeRedis.connect()
    t.after(() => nodeRedis.disconnect())
    const client = ioredis(t)
    const key = prefix(`rs-node-redis${version}`)
    const ours = new face.Mutex(nodeRedis, key, { lockTimeout: 1000, refreshInterval: 0 })
    await ours.acquire()
    assert.equal(await new original.Mutex(client, key, once).tryAcquire(), false)
    await ours.release()
    const sem = new face.MultiSemaphore(nodeRedis, key, 2, 2)
    await sem.acquire()
    assert.equal(await new original.Semaphore(client, key, 2, once).tryAcquire(), false)
    await sem.release()
    assert.equal(await client.exists(`mutex:${key}`, `semaphore:${key}`), 0)
  })
}

test('Redlock variants of the face and the original exclude each other over three servers', async (t) => {
  const servers = await startRedisServers(t, 3)
  if (!servers) return
  t.after(() => Promise.all(servers.map((s) => s.kill())))
  const clients = servers.map((s) => ioredis(t, s.url))
  const key = prefix('rs-redlock')
  const theirs = new original.RedlockMutex(clients, key, { refreshInterval: 0 })
  await theirs.acquire()
  assert.equal(await new face.RedlockMutex(clients, key, once).tryAcquire(), false)
  await theirs.release()
  const ours = new face.RedlockSemaphore(clients, key, 1)
  await ours.acquire()
  assert.equal(await new original.RedlockSemaphore(clients, key, 1, once).tryAcquire(), false)
  assert.equal(await new original.RedlockMultiSemaphore(clients, key, 2, 2, once).tryAcquire(), false)
  await ours.release()
})

test('a lock that expired between refreshes and was taken meanwhile is reported lost, not taken again (#175)', async (t) => {
  if (!(await needRedis(t))) return
  const client = ioredis(t)
  const key = prefix('rs-175')
  const lost = signal()
  // Refreshed less often than it expires: a stand-in for a refresh delayed past the lease.
  const ours = new face.Mutex(client, key, { lockTimeout: 100, refreshInterval: 400, onLockLost: lost.resolve })
  await ours.acquire()
  // Another process takes the lock once it has expired, and gives it back.
  const other = new original.Mutex(client, key, { refreshInterval: 0, retryInterval: 5 })
  await other.acquire()
  await other.release()
  const err = await lost.promise
  assert.ok(err instanceof face.LostLockError)
  assert.equal(err.reason, 'not-owned')
  assert.equal(ours.isAcquired, false)
  assert.equal(await client.get(`mutex:${key}`), null)
})

test('a lock whose refresh gets no answer for a whole lockTimeout is reported lost (#175)', { timeout: 30_000 }, async (t) => {
  const servers = await startRedisServers(t, 1)
  if (!servers) return
  const [server] = servers
  t.after(() => { server.resume(); return server.kill() })
  const client = ioredis(t, server.url)
  const lost = signal()
  const ours = new face.Mutex(client, prefix('rs-unanswered'), { lockTimeout: 300, refreshInterval: 100, onLockLost: lost.resolve })
  await ours.acquire()
  // The server stops answering; the refresh in flight never completes.
  server.pause()
  const err = await lost.promise
  assert.equal(err.reason, 'expired')
  assert.equal(ours.isAcquired, false)
})

test('a refresh whose "still ours" answer arrives after the lease\'s end keeps the lock', async (t) => {
  if (!(await needRedis(t))) return
  const raw = ioredis(t)
  // The server runs each refresh at once; the next answer is held back until the gate opens.
  const entered = signal()
  const opened = signal()
  let armed = false
  const client = new Proxy(raw, {
    get(target, prop) {
      const value = target[prop]
      if (prop === 'evalsha' && armed) {
        return (...args) => {
          armed = false
          entered.resolve()
          return value.apply(target, args).then((reply) => opened.promise.then(() => reply))
        }
      }
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
  const key = prefix('rs-late')
  const lost = []
  // The refresh that is held back runs 400 ms in, so the key lives on the server until 1 400 ms.
  const lock = new face.Mutex(client, key, { lockTimeout: 1000, refreshInterval: 400, onLockLost: (err) => lost.push(err) })
  await lock.acquire()
  armed = true
  await entered.promise
  const leaseEnd = lock.validUntil
  await eventually(() => Date.now() > leaseEnd + 50, 5000, 'the lease to end')
  opened.resolve()
  await eventually(() => lock.validUntil > leaseEnd, 5000, 'the late answer to count')
  assert.equal(lock.isAcquired, true)
  assert.deepEqual(lost, [])
  assert.equal(await raw.get(`mutex:${key}`), lock.identifier)
  await lock.release()
})

test('a release during a refresh waits for it and leaves no key behind on any server (#205)', async (t) => {
  const servers = await startRedisServers(t, 3)
  if (!servers) return
  t.after(() => Promise.all(servers.map((s) => s.kill())))
  const clients = servers.map((s) => ioredis(t, s.url))
  const first = gated(clients[0], 'set')
  const key = prefix('rs-205')
  // One lock and release first, so that the servers have the scripts and a release's
  // deletions are sent at once (not after a NOSCRIPT round trip).
  const warm = new face.RedlockMutex(clients, `${key}warm`, { refreshInterval: 0 })
  await warm.acquire()
  await warm.release()
  const onLockLost = () => assert.fail('reported lost')
  const lock = new face.RedlockMutex([first.client, clients[1], clients[2]], key, { lockTimeout: 2000, refreshInterval: 50, onLockLost })
  await lock.acquire()
  // The lock expires on one server: the next refresh, with a majority, takes it again there,
  // and that SET waits at the gate.
  await clients[0].del(`mutex:${key}`)
  first.arm()
  await first.entered
  const releasing = lock.release()
  first.open()
  await releasing
  // Each client's replies come in order: after a PING, anything sent before it has run.
  await Promise.all(clients.map((c) => c.ping()))
  assert.deepEqual(await Promise.all(clients.map((c) => c.get(`mutex:${key}`))), [null, null, null])
})

test('a Redlock MultiSemaphore without a quorum gives back every permit it was granted', async (t) => {
  const servers = await startRedisServers(t, 3)
  if (!servers) return
  t.after(() => Promise.all(servers.map((s) => s.kill())))
  const clients = servers.map((s) => ioredis(t, s.url))
  const key = prefix('rs-undo')
  // The second and third servers are full; the first grants both permits.
  await Promise.all([clients[1], clients[2]].map((c) => c.zadd(`semaphore:${key}`, Date.now(), 'someone')))
  const lock = new face.RedlockMultiSemaphore(clients, key, 2, 2, once)
  assert.equal(await lock.tryAcquire(), false)
  assert.equal(await clients[0].zcard(`semaphore:${key}`), 0)
})

test('by default a lost lock is a process warning, not an unhandled rejection', async (t) => {
  if (!(await needRedis(t))) return
  const client = ioredis(t)
  const key = prefix('rs-warning')
  const warned = signal()
  const onWarning = (w) => { if (w instanceof face.LostLockError) warned.resolve(w) }
  const onRejection = (reason) => warned.resolve(reason)
  process.on('warning', onWarning)
  process.on('unhandledRejection', onRejection)
  t.after(() => {
    process.off('warning', onWarning)
    process.off('unhandledRejection', onRejection)
  })
  const ours = new face.Mutex(client, key, { lockTimeout: 1000, refreshInterval: 20 })
  await ours.acquire()
  await client.del(`mutex:${key}`)
  const err = await warned.promise
  assert.ok(err instanceof face.LostLockError)
  assert.ok(err instanceof LockLostError)
  assert.equal(err.code, 'ERR_LOCK_LOST')
  assert.equal(err.name, 'LostLockError')
  assert.equal(ours.isAcquired, false)
})

test('acquire() that times out rejects with TimeoutError carrying the original\'s message and a code', async (t) => {
  if (!(await needRedis(t))) return
  const client = ioredis(t)
  const key = prefix('rs-timeout')
  const holder = new face.Mutex(client, key)
  await holder.acquire()
  try {
    await assert.rejects(new face.Mutex(client, key, { acquireTimeout: 30 }).acquire(), (err) => {
      assert.ok(err instanceof face.TimeoutError)
      assert.equal(err.message, `Acquire mutex mutex:${key} timeout`)
      assert.equal(err.code, 'ERR_LOCK_ACQUISITION')
      return true
    })
  } finally {
    await holder.release()
  }
})

test('bad arguments are refused with a code before any I/O', () => {
  const client = { set() {}, eval() {}, evalsha() {} }
  const code = (fn) => { try { fn() } catch (err) { return err.code } return 'none' }
  assert.equal(code(() => new face.Mutex(null, 'k')), 'ERR_INVALID_ARG_TYPE')
  assert.equal(code(() => new face.Mutex({}, 'k')), 'ERR_INVALID_ARG_TYPE')
  assert.equal(code(() => new face.Mutex(client, '')), 'ERR_INVALID_ARG_VALUE')
  assert.equal(code(() => new face.Mutex(client, 'k', { lockTimeout: 0 })), 'ERR_OUT_OF_RANGE')
  assert.equal(code(() => new face.Mutex(client, 'k', { retryInterval: '10' })), 'ERR_INVALID_ARG_TYPE')
  assert.equal(code(() => new face.Semaphore(client, 'k', 1.5)), 'ERR_OUT_OF_RANGE')
  assert.equal(code(() => new face.MultiSemaphore(client, 'k', 2, -1)), 'ERR_OUT_OF_RANGE')
  assert.equal(code(() => new face.RedlockMutex([], 'k')), 'ERR_INVALID_ARG_TYPE')
  assert.equal(code(() => new face.Mutex(client, 'k', { onLockLost: 'no' })), 'ERR_INVALID_ARG_TYPE')
})

test('validUntil is the last confirmation plus lockTimeout while held, and null otherwise', async (t) => {
  if (!(await needRedis(t))) return
  const client = ioredis(t)
  const lock = new face.Mutex(client, prefix('rs-valid'), { lockTimeout: 5000, refreshInterval: 0 })
  assert.equal(lock.validUntil, null)
  const before = Date.now()
  await lock.acquire()
  const after = Date.now()
  assert.ok(lock.validUntil >= before + 5000 && lock.validUntil <= after + 5000)
  await lock.release()
  assert.equal(lock.validUntil, null)
})

test('mutexes taken in the same tick on one ioredis client leave in one socket write', async (t) => {
  if (!(await needRedis(t))) return
  const c = new Redis(REDIS_URL)
  t.after(() => c.quit())
  await c.ping()
  const stream = c.stream
  let writes = 0
  const write = stream._write
  const writev = stream._writev
  stream._write = function (...args) {
    writes++
    return write.apply(this, args)
  }
  stream._writev = function (...args) {
    writes++
    return writev.apply(this, args)
  }
  const p = prefix('sem')
  const mutexes = Array.from({ length: 20 }, (_, i) => new face.Mutex(c, `${p}w${i}`, once))
  await Promise.all(mutexes.map((m) => m.acquire()))
  assert.equal(writes, 1)
  await Promise.all(mutexes.map((m) => m.release()))
  assert.equal(writes, 2)
})

test('a release hands the mutex to an acquisition waiting on it in the same process, not to its next retry', { timeout: 30_000 }, async (t) => {
  if (!(await needRedis(t))) return
  const c = new Redis(REDIS_URL)
  t.after(() => c.quit())
  const key = prefix('sem') + 'wake'
  const first = new face.Mutex(c, key, { lockTimeout: 60_000, refreshInterval: 0 })
  await first.acquire()
  // Without the wake-up the waiter would ask again only a minute later (past the test's guard).
  const second = new face.Mutex(c, key, { lockTimeout: 60_000, acquireTimeout: 120_000, acquireAttemptsLimit: 2, retryInterval: 60_000, refreshInterval: 0 })
  // The waiter is pausing once its first SET NX was answered and its promise jobs ran.
  const set = c.set
  let refused
  const answered = new Promise((resolve) => { refused = resolve })
  c.set = function (...args) {
    const reply = set.apply(this, args)
    reply.then(() => setImmediate(refused), () => {})
    return reply
  }
  const waiting = second.acquire()
  await answered
  c.set = set
  await first.release()
  // The waiter's attempt followed the release on the connection: a third asking now is refused.
  const third = new face.Mutex(c, key, { ...once, lockTimeout: 60_000 })
  assert.equal(await third.tryAcquire(), false)
  await waiting
  assert.equal(second.isAcquired, true)
  assert.equal(await c.get(`mutex:${key}`), second.identifier)
  await second.release()
})

test('an abort while an acquisition pauses between attempts rejects it with the signal\'s reason', async (t) => {
  if (!(await needRedis(t))) return
  const c = new Redis(REDIS_URL)
  t.after(() => c.quit())
  const key = prefix('sem') + 'abort'
  const first = new face.Mutex(c, key, { lockTimeout: 60_000, refreshInterval: 0 })
  await first.acquire()
  const controller = new AbortController()
  const second = new face.Mutex(c, key, { lockTimeout: 60_000, acquireTimeout: 120_000, retryInterval: 60_000, refreshInterval: 0 })
  const waiting = second.acquire(controller.signal)
  const reason = new Error('stop')
  setImmediate(() => controller.abort(reason))
  await assert.rejects(waiting, (err) => err === reason)
  assert.equal(second.isAcquired, false)
  await first.release()
})
