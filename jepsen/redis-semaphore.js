'use strict'
// The redis-semaphore face under the harness (`--lock redis-semaphore`): a client with the part
// of LockClient's interface the mutex and semaphore workloads use, built on
// deadbolt/redis-semaphore's Mutex and Semaphore (one Redis) or RedlockMutex and
// RedlockSemaphore (the redlock store's servers) over ioredis clients, as an application
// using redis-semaphore would. The face has no fencing token (`fencingToken` is null: nothing
// is written to the register); `held` is `isAcquired`, `validUntil` the face's own bound (the
// start of the last confirmed acquire or refresh plus lockTimeout), a loss (onLockLost) aborts
// `signal`.

const Redis = require('ioredis')
const { Mutex, Semaphore, RedlockMutex, RedlockSemaphore } = require('../redis-semaphore')

/** `url`: a redis:// URL, or an array of them (Redlock over those servers). */
function redisSemaphoreClient(url) {
  const redlock = Array.isArray(url)
  const clients = (redlock ? url : [url]).map((u) => {
    // A command that gets no answer fails after a second, so that no call waits forever.
    const c = new Redis(u, { maxRetriesPerRequest: 1, commandTimeout: 1000 })
    c.on('error', () => {})
    return c
  })
  const target = redlock ? clients : clients[0]

  async function take(key, make, { ttl = 1000, wait = 2000, autoExtend = false } = {}) {
    const ac = new AbortController()
    const lock = make({
      lockTimeout: ttl,
      acquireTimeout: wait,
      retryInterval: 20,
      refreshInterval: autoExtend ? Math.round(ttl / 3) : 0,
      onLockLost: (err) => ac.abort(err),
    })
    if (!(await lock.tryAcquire())) throw Object.assign(new Error('busy'), { code: 'ERR_LOCK_ACQUISITION' })
    return {
      key,
      owner: lock.identifier,
      fencingToken: null,
      get held() { return lock.isAcquired },
      get validUntil() { return lock.validUntil },
      signal: ac.signal,
      async release() {
        const was = lock.isAcquired
        await lock.release()
        return was
      },
    }
  }

  return {
    acquire(key, options) {
      const Lock = redlock ? RedlockMutex : Mutex
      return take(key, (o) => new Lock(target, key, o), options)
    },
    semaphore(key, { limit }) {
      const Lock = redlock ? RedlockSemaphore : Semaphore
      return { acquire: (options) => take(key, (o) => new Lock(target, key, limit, o), options) }
    },
    async list() { return [] },
    async close() { for (const c of clients) c.disconnect() },
  }
}

module.exports = { redisSemaphoreClient }
