'use strict'
// The redislock face given cluster clients (ioredis Cluster, node-redis createCluster v5 and
// v4): it reads their nodes, and keeps redislock's wire format (the bare id, with or without
// `fencing: true`) on a throwaway cluster.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const Redis = require('ioredis')
const { createCluster } = require('redis')
const { createCluster: createCluster4 } = require('redis4')
const { createLock, LockAcquisitionError } = require('..')
const { prefix } = require('./helpers')
const { startRedisCluster } = require('./fixtures/redis-server')

let cluster = null
let ready = null
before(async () => {
  ready = new Promise((resolve) => {
    startRedisCluster({ skip() {} }, 3).then((c) => { cluster = c; resolve(c) }, () => resolve(null))
  })
})
after(async () => {
  if (cluster) await cluster.stop()
})

async function need(t) {
  const c = await ready
  if (c) return c
  if (process.env.CI) throw new Error('could not start a Redis Cluster')
  t.skip('could not start a Redis Cluster (redis-server missing?)')
  return null
}

test('a fenced lock through an ioredis Cluster and a tokenless one through a node-redis cluster exclude each other', async (t) => {
  const c = await need(t)
  if (!c) return
  const io = new Redis.Cluster(c.nodes.map((n) => ({ host: '127.0.0.1', port: n.port })), { lazyConnect: true })
  const nr = createCluster({ rootNodes: [{ url: c.urls[1] }, { socket: { host: '127.0.0.1', port: c.nodes[2].port } }] })
  try {
    const k = prefix('redislock-cluster') + 'k'
    // Both in redislock's wire format (the bare id), a with a token, b without.
    const a = createLock(io, { timeout: 5000, fencing: true })
    const b = createLock(nr, { timeout: 5000, retries: 0 })
    await a.acquire(k)
    // The client was only read: deadbolt has its own connections.
    assert.equal(io.status, 'wait')
    assert.equal(nr.isOpen, false)
    await io.connect()
    assert.equal(await io.get(k), a._id)
    await assert.rejects(b.acquire(k), LockAcquisitionError)
    await a.release()
    assert.equal(await io.get(k), null)
    await b.acquire(k)
    assert.deepEqual(await io.getBuffer(k), Buffer.from(b._id))
    await b.release()
  } finally {
    io.disconnect()
  }
})

test('a connected node-redis v4 cluster, whose options are private, is read through its masters', async (t) => {
  const c = await need(t)
  if (!c) return
  const nr4 = createCluster4({ rootNodes: [{ url: c.urls[0] }] })
  await nr4.connect()
  try {
    const k = prefix('redislock-cluster') + 'v4'
    const lock = createLock(nr4, { timeout: 5000 })
    await lock.acquire(k)
    // The bare id, redislock's value.
    assert.equal(await nr4.get(k), lock._id)
    await lock.release()
    assert.equal(await nr4.get(k), null)
  } finally {
    await nr4.disconnect()
  }
})

test('a node-redis v4 cluster that was never connected is refused before any I/O, naming the reason', () => {
  const nr4 = createCluster4({ rootNodes: [{ url: 'redis://127.0.0.1:1' }] })
  assert.throws(() => createLock(nr4), (err) => err.code === 'ERR_INVALID_ARG_VALUE' && /connect it first/.test(err.message))
})
