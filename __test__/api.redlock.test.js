'use strict'
// The modern-API suite on Redlock over three throwaway servers.
const { apiSuite } = require('./api.shared')
const { after } = require('node:test')
const Redis = require('ioredis')
const { startRedisServers } = require('./fixtures/redis-server')

let servers = null
after(async () => {
  if (servers) await Promise.all(servers.map((s) => s.kill()))
})

apiSuite({
  name: 'redlock',
  get url() { return servers.map((s) => s.url) },
  need: async (t) => {
    servers ??= await startRedisServers(t, 3)
    return servers !== null
  },
  breakLock: async (key) => {
    await Promise.all(servers.map(async (s) => {
      const r = new Redis(s.url)
      try { await r.del(key) } finally { r.disconnect() }
    }))
  },
  crossProcess: true,
  fairAcrossProcesses: true,
  sharedPermitTokens: true,
})
