'use strict'
const { apiSuite } = require('./api.shared')
const { REDIS_URL, needRedis, redisRaw, closeRaw } = require('./helpers')
const { after } = require('node:test')

after(closeRaw)

apiSuite({
  name: 'redis',
  url: REDIS_URL,
  need: needRedis,
  breakLock: async (key) => { await redisRaw().del(key) },
  crossProcess: true,
  fairAcrossProcesses: true,
})
