'use strict'
// The modern-API suite on a Sentinel-managed primary (one replica, three sentinels, all
// throwaway), every grant and extension acknowledged by the replica (waitReplicas: 1).
const { apiSuite } = require('./api.shared')
const { after } = require('node:test')
const Redis = require('ioredis')
const { startRedisSentinel } = require('./fixtures/redis-server')

let sentinel = null
after(async () => {
  if (sentinel) await sentinel.stop()
})

apiSuite({
  name: 'sentinel',
  get url() { return { sentinels: sentinel.urls, name: sentinel.name, waitReplicas: 1, waitTimeout: 1000 } },
  need: async (t) => {
    sentinel ??= await startRedisSentinel(t, 1)
    return sentinel !== null
  },
  breakLock: async (key) => {
    const r = new Redis(sentinel.servers[0].url)
    try { await r.del(key) } finally { r.disconnect() }
  },
  crossProcess: true,
  fairAcrossProcesses: true,
})
