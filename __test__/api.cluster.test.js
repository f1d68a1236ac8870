'use strict'
// The modern-API suite on a Redis Cluster of three throwaway primaries.
const { apiSuite } = require('./api.shared')
const { after } = require('node:test')
const Redis = require('ioredis')
const { startRedisCluster } = require('./fixtures/redis-server')

let cluster = null
let raw = null
after(async () => {
  if (raw) raw.disconnect()
  if (cluster) await cluster.stop()
})

apiSuite({
  name: 'cluster',
  get url() { return { cluster: cluster.urls } },
  need: async (t) => {
    cluster ??= await startRedisCluster(t, 3)
    return cluster !== null
  },
  breakLock: async (key) => {
    raw ??= new Redis.Cluster(cluster.nodes.map((n) => ({ host: '127.0.0.1', port: n.port })))
    await raw.del(key)
  },
  crossProcess: true,
  fairAcrossProcesses: true,
})
