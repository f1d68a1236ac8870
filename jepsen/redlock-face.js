'use strict'
// `--lock redlock`: the mutex workload through deadbolt's node-redlock face
// (`deadbolt/redlock`) instead of deadbolt's own client, on the redis (one server) or redlock
// (three servers) store. Each actor has its own ioredis clients, one per server, reaching it
// through the actor's relays as any worker does (so network faults hit them); a 1 s command
// timeout, as a careful node-redlock user sets, keeps a blackholed server from hanging a vote.
// node-redlock has no fencing token and no heartbeat: a grant has no token (the register is
// not written), `held` is the face's local validity (`lock.expiration`, reckoned from the
// attempt that won, less drift), and autoExtend extends a third of the ttl before that
// validity ends, as using() does; a failed extension aborts the signal.

const Redis = require('ioredis')
const { default: Redlock } = require('../redlock')

/** A client with the part of LockClient's interface the mutex workload uses. */
function redlockFaceClient(url) {
  const urls = Array.isArray(url) ? url : [url]
  const clients = urls.map((u) => {
    const c = new Redis(u, { maxRetriesPerRequest: 1, commandTimeout: 1000, connectTimeout: 1000 })
    c.on('error', () => {})
    return c
  })
  const redlock = new Redlock(clients, { retryDelay: 20, retryJitter: 10 })
  return {
    async acquire(key, { ttl = 1000, wait = 2000, autoExtend = false } = {}) {
      let lock = await redlock.acquire([key], ttl, { retryCount: Math.ceil(wait / 20) })
      const ac = new AbortController()
      let timer = null
      const extend = async () => {
        try {
          lock = await lock.extend(ttl)
          schedule()
        } catch (err) {
          ac.abort(err)
        }
      }
      const schedule = () => {
        if (!autoExtend) return
        timer = setTimeout(extend, Math.max(0, lock.expiration - Date.now() - Math.floor(ttl / 3)))
      }
      schedule()
      return {
        key,
        owner: lock.value,
        fencingToken: null,
        get held() { return lock.expiration > Date.now() },
        get validUntil() { return lock.expiration || null },
        signal: ac.signal,
        async release() {
          if (timer !== null) clearTimeout(timer)
          const was = lock.expiration > Date.now()
          await lock.release().catch(() => {})
          return was
        },
      }
    },
    async list() { return [] },
    async close() { for (const c of clients) c.disconnect() },
  }
}

module.exports = { redlockFaceClient }
