'use strict'
// The control: a deliberately unsafe lock, so the checker is seen to fail. It reads the key,
// and if it looks free writes its own owner in a second step (no atomic step), draws its
// "token" the same way (read, add one, write: two holders can get the same one), never
// fences, never learns of a loss (`held` stays true until release) and never looks at the
// lease again. It keeps its state in memory (actors of one process) or in a Redis server (a
// plain GET then SET, through ioredis), with a pause between read and write as a network
// round trip would make. Selected with `--lock unsafe`.

const { randomBytes } = require('node:crypto')

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const shared = new Map() // the in-memory store: key → { value, until }

function memoryKv() {
  const jitter = () => sleep(Math.random() * 3)
  return {
    async get(k) { await jitter(); const e = shared.get(k); return e && (e.until === null || e.until > Date.now()) ? e.value : null },
    async set(k, v, ttl) { await jitter(); shared.set(k, { value: v, until: ttl ? Date.now() + ttl : null }) },
    async del(k) { await jitter(); shared.delete(k) },
    async keys(prefix) { return [...shared.keys()].filter((k) => k.startsWith(prefix) && this.get(k) !== null) },
    async close() {},
  }
}

function redisKv(url) {
  const Redis = require('ioredis')
  const c = new Redis(url, { maxRetriesPerRequest: 1 })
  c.on('error', () => {})
  return {
    get: (k) => c.get(k),
    set: (k, v, ttl) => (ttl ? c.set(k, v, 'PX', ttl) : c.set(k, v)),
    del: (k) => c.del(k),
    async close() { c.disconnect() },
  }
}

/** A client with the part of LockClient's interface the mutex workload uses. */
function unsafeClient(url) {
  const kv = url.startsWith('redis://') ? redisKv(url) : memoryKv()
  return {
    async acquire(key, { ttl = 1000, wait = 2000, retryDelay = 20 } = {}) {
      const end = Date.now() + wait
      for (;;) {
        if ((await kv.get(key)) === null) {
          const owner = randomBytes(6).toString('hex')
          const token = BigInt(await kv.get(`${key}:tok`) ?? 0) + 1n
          await kv.set(`${key}:tok`, String(token))
          await kv.set(key, owner, ttl)
          let held = true
          const ac = new AbortController()
          return {
            key,
            owner,
            fencingToken: token,
            get held() { return held },
            validUntil: null,
            signal: ac.signal,
            stopExtending() { return held },
            async release() { const was = held; held = false; if ((await kv.get(key)) === owner) await kv.del(key); return was },
          }
        }
        if (Date.now() > end) throw Object.assign(new Error('busy'), { code: 'ERR_LOCK_ACQUISITION' })
        await sleep(retryDelay * (0.5 + Math.random()))
      }
    },
    async list() { return [] },
    async close() { await kv.close() },
  }
}

module.exports = { unsafeClient }
