'use strict'
// Calls made from JavaScript are written, and their replies read, on the JavaScript thread
// through a connection of its own (the foreground lane); everything else uses the runtime's
// connection. The lane is a fast path only: when it breaks, what it carried is answered over
// the other connection, and a blocked event loop never holds up a lease.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { connect } = require('..')
const { REDIS_URL, needRedis, prefix, eventually, closeRaw, redisRaw } = require('./helpers')
const { tcpProxy } = require('./fixtures/tcp-proxy')

after(closeRaw)

const port = () => Number(new URL(REDIS_URL).port || 6379)

test('acquisitions in flight when every connection is cut are all granted once the network is back', async (t) => {
  if (!(await needRedis(t))) return
  const proxy = await tcpProxy(port())
  const locks = await connect(`redis://127.0.0.1:${proxy.port}`, { responseTimeout: 10_000 })
  try {
    const p = prefix('lane-cut')
    // Warm up until both connections are open (the lane opens on first use, on the runtime).
    await eventually(async () => {
      const l = await locks.acquire(p + 'warm')
      await l.release()
      return proxy.stats.connections >= 2
    }, 5000, 'the foreground connection opened')
    proxy.pause()
    const pending = Array.from({ length: 100 }, (_, i) => locks.acquire(p + i, { ttl: 20_000 }))
    // Written, but never forwarded: the replies can only come over new connections.
    await new Promise((r) => setTimeout(r, 100))
    proxy.cut()
    proxy.resume()
    const held = await Promise.all(pending)
    assert.equal(held.length, 100)
    assert.ok(held.every((l) => l.held))
    assert.ok(held.every((l) => typeof l.fencingToken === 'bigint'))
    const owners = await redisRaw().mget(held.map((_, i) => p + i))
    owners.forEach((v, i) => assert.ok(v.startsWith(held[i].owner), `${p + i} is held by its lock`))
    await Promise.all(held.map((l) => l.release()))
  } finally {
    await locks.close()
    await proxy.close()
  }
})

test('sequential calls use one foreground connection, and a pipelined load opens at most three', async (t) => {
  if (!(await needRedis(t))) return
  const proxy = await tcpProxy(port())
  const locks = await connect(`redis://127.0.0.1:${proxy.port}`)
  try {
    const p = prefix('lanes')
    // The runtime's connection and, once it is open, the first lane.
    await eventually(async () => {
      const l = await locks.acquire(p + 'warm')
      await l.release()
      return proxy.stats.connections >= 2
    }, 5000, 'the foreground connection opened')
    for (let i = 0; i < 200; i++) await (await locks.acquire(p + 's' + i)).release()
    assert.equal(proxy.stats.connections, 2)
    // 300 in flight at a time: the lanes after the first open when the ones before are full
    // (48 requests each), and no more than three are ever opened.
    let round = 0
    const burst = async () => {
      const held = await Promise.all(Array.from({ length: 300 }, (_, i) => locks.acquire(`${p}b${round}:${i}`)))
      round++
      assert.ok((await Promise.all(held.map((l) => l.release()))).every((r) => r === true))
    }
    await eventually(async () => {
      await burst()
      return proxy.stats.connections === 4
    }, 10_000, 'three foreground connections open')
    for (let i = 0; i < 5; i++) await burst()
    assert.equal(proxy.stats.connections, 4)
  } finally {
    await locks.close()
    await proxy.close()
  }
})

test('a lock keeps its lease while the event loop is blocked for longer than the lease', async (t) => {
  if (!(await needRedis(t))) return
  const locks = await connect(REDIS_URL)
  try {
    const k = prefix('lane-block') + 'k'
    // Acquired from JavaScript (over the lane); its heartbeats go over the runtime's connection.
    const lock = await locks.acquire(k, { ttl: 300, autoExtend: true, extendEvery: 100 })
    const until = Date.now() + 1000
    while (Date.now() < until) { /* the event loop is blocked: nothing here reads the lane */ }
    assert.equal(lock.held, true)
    assert.ok((await redisRaw().get(k)).startsWith(lock.owner), 'still held in Redis after 3 leases')
    assert.equal(await lock.release(), true)
  } finally {
    await locks.close()
  }
})
