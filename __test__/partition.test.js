'use strict'
// A holder cut off from the store (its connection frozen: a relay that stops forwarding while
// everyone else reaches the store) stops believing it holds no later than the moment another
// client is granted the lock; and no call on a frozen connection hangs past its bound.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { connect, LockBackendError, LockLostError } = require('..')
const { REDIS_URL, MYSQL_URL, PG_URL, needRedis, needMysql, needPg, prefix } = require('./helpers')
const { tcpProxy } = require('./fixtures/tcp-proxy')

function throughProxy(url, port) {
  const u = new URL(url)
  u.host = `127.0.0.1:${port}`
  return u.toString()
}

const STORES = [
  { name: 'redis', url: REDIS_URL, need: needRedis },
  { name: 'mysql', url: MYSQL_URL, need: needMysql },
  { name: 'postgres', url: PG_URL, need: needPg },
]

for (const store of STORES) {
  test(`on ${store.name}, a holder whose connection froze no longer holds when someone else is granted the lock`, async (t) => {
    if (!(await store.need(t))) return
    const proxy = await tcpProxy(Number(new URL(store.url).port))
    // A long response timeout: the heartbeat's extension hangs far past the lease.
    const cutOff = await connect(throughProxy(store.url, proxy.port), { responseTimeout: 20_000 })
    const others = await connect(store.url)
    try {
      const key = prefix('frozen') + store.name
      const ttl = 1500
      const lock = await cutOff.acquire(key, { ttl, autoExtend: true, extendEvery: 300 })
      const lost = new Promise((resolve) => lock.signal.addEventListener('abort', () => resolve(lock.signal.reason), { once: true }))
      proxy.pause()
      const taken = await others.acquire(key, { ttl: 5000, wait: 20_000, retryDelay: 20 })
      // Read in the same turn as the grant: the cut-off holder must already know.
      assert.equal(lock.held, false, 'the cut-off holder still believed it held')
      const reason = await lost
      assert.ok(reason instanceof LockLostError)
      assert.equal(reason.reason, 'unreachable')
      await taken.release()
    } finally {
      await proxy.close()
      await Promise.all([cutOff.close(), others.close()])
    }
  })
}

for (const store of STORES.filter((s) => s.name !== 'redis')) test(`on ${store.name}, every call over a frozen connection fails within connectTimeout + responseTimeout`, async (t) => {
  if (!(await store.need(t))) return
  const proxy = await tcpProxy(Number(new URL(store.url).port))
  const bound = 400 + 400
  const locks = await connect(throughProxy(store.url, proxy.port), { connectTimeout: 400, responseTimeout: 400 })
  try {
    proxy.pause()
    const key = prefix(`frozen-${store.name}`) + 'k'
    for (const [what, call] of [
      ['tryAcquire', () => locks.tryAcquire(key)],
      ['acquire', () => locks.acquire(key, { wait: Infinity })],
      ['inspect', () => locks.inspect(key)],
      ['ping', () => locks.ping()],
    ]) {
      const started = performance.now()
      await assert.rejects(call(), (err) => err instanceof LockBackendError && err.cause.code === 'ERR_LOCK_STORE_TIMEOUT', what)
      const took = performance.now() - started
      // The bound itself is the promise; the slack covers a loaded machine.
      assert.ok(took < bound + 3000, `${what} took ${took.toFixed(0)} ms`)
    }
    const started = performance.now()
    await locks.close()
    assert.ok(performance.now() - started < bound + 3000, 'close() returned')
  } finally {
    await proxy.close()
    await locks.close()
  }
})
