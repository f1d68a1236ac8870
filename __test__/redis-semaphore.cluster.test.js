'use strict'
// The redis-semaphore face given cluster clients (an ioredis Cluster, a node-redis 5
// createCluster), on a throwaway Redis Cluster, beside the original on the ioredis Cluster.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const Redis = require('ioredis')
const { createCluster } = require('redis')
const original = require('redis-semaphore')
const face = require('../redis-semaphore')
const { prefix } = require('./helpers')
const { startRedisCluster } = require('./fixtures/redis-server')

const once = { acquireAttemptsLimit: 1, refreshInterval: 0 }

test('the face locks through an ioredis Cluster and a node-redis cluster, and excludes the original', async (t) => {
  const cluster = await startRedisCluster(t, 3)
  if (!cluster) return
  t.after(() => cluster.stop())
  const io = new Redis.Cluster(cluster.nodes.map((n) => ({ host: '127.0.0.1', port: n.port })))
  t.after(() => io.disconnect())
  const nr = createCluster({ rootNodes: [{ url: cluster.urls[0] }] })
  await nr.connect()
  t.after(() => nr.destroy())
  for (const [name, client] of [['ioredis', io], ['node-redis', nr]]) {
    const key = prefix(`rs-cluster-${name}`)
    const ours = new face.Mutex(client, key, { lockTimeout: 2000, refreshInterval: 100 })
    await ours.acquire()
    assert.equal(await io.get(`mutex:${key}`), ours.identifier, name)
    assert.equal(await new original.Mutex(io, key, once).tryAcquire(), false, name)
    await ours.release()
    assert.equal(await io.get(`mutex:${key}`), null, name)
    const sem = new face.MultiSemaphore(client, key, 2, 2)
    await sem.acquire()
    assert.equal(await new original.Semaphore(io, key, 2, once).tryAcquire(), false, name)
    await sem.release()
    assert.equal(await io.zcard(`semaphore:${key}`), 0, name)
  }
})
