'use strict'
// Shared by the specs: server checks (fail under CI, skip elsewhere), random key prefixes,
// and raw clients for looking at what deadbolt wrote.

const net = require('node:net')
const { randomBytes } = require('node:crypto')
const { execFileSync } = require('node:child_process')

const REDIS_URL = process.env.DEADBOLT_TEST_REDIS_URL || 'redis://127.0.0.1:6379'
const MYSQL_URL = process.env.DEADBOLT_TEST_MYSQL_URL || 'mysql://root@127.0.0.1:3306/test'
const PG_URL = process.env.DEADBOLT_TEST_PG_URL || 'postgres://postgres@127.0.0.1:5432/test'

function answers(port, host = '127.0.0.1') {
  return new Promise((resolve) => {
    const s = net.connect({ port, host })
    s.once('connect', () => { s.destroy(); resolve(true) })
    s.once('error', () => resolve(false))
    s.setTimeout(1000, () => { s.destroy(); resolve(false) })
  })
}

/**
 * Returns true if the server answers. Under CI a missing server is a failure (throws);
 * elsewhere the calling test is skipped.
 */
async function needServer(t, name, port) {
  if (await answers(port)) return true
  const msg = `${name} is not answering on 127.0.0.1:${port} (start it with scripts/services.sh)`
  if (process.env.CI) throw new Error(msg)
  t.skip(msg)
  return false
}

const needRedis = (t) => needServer(t, 'Redis', 6379)
const needMysql = (t) => needServer(t, 'MariaDB', 3306)
const needPg = (t) => needServer(t, 'PostgreSQL', 5432)

/** A random key prefix, so tests never see each other's keys. */
function prefix(name = 'test') {
  return `deadbolt:${name}:${randomBytes(6).toString('hex')}:`
}

let raw = null
/** A plain ioredis client for checking what is in Redis. */
function redisRaw() {
  if (raw === null) {
    const Redis = require('ioredis')
    raw = new Redis(REDIS_URL, { lazyConnect: false, maxRetriesPerRequest: 1 })
  }
  return raw
}

function closeRaw() {
  if (raw !== null) raw.disconnect()
  raw = null
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

/** A TCP server that accepts connections and never answers (a hung Redis). */
async function blackhole() {
  const sockets = new Set()
  const server = net.createServer((s) => { sockets.add(s); s.on('error', () => {}) })
  await new Promise((r) => server.listen(0, '127.0.0.1', r))
  return {
    port: server.address().port,
    close: () => { for (const s of sockets) s.destroy(); server.close() },
  }
}

/** A loopback port that was free a moment ago (and that nothing answers on until used). */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => resolve(port))
    })
  })
}

/** Waits until `fn()` is truthy (checked every 5 ms), failing after `ms`. */
async function eventually(fn, ms = 5000, what = 'condition') {
  const end = Date.now() + ms
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await sleep(5)
  }
}

/**
 * The environment of a user's shell, for running npm and node as a user would: without the
 * npm_* variables `npm test` sets for its own script (npm_config_local_prefix would point a
 * child npm at this checkout, npm_command would tell prepare.js what runs it), but keeping
 * the npm settings that say where packages come from (a registry mirror, a proxy, the cache).
 */
function shellEnv(extra = {}) {
  const keep = /^npm_config_(registry|cache|userconfig|globalconfig|cafile|proxy|https_proxy|noproxy|strict_ssl)$/i
  const env = {}
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k) || keep.test(k)) env[k] = v
  return { ...env, ...extra }
}

/** tmux's path, or null (then the test fails under CI and is skipped elsewhere). */
function tmux(t) {
  try {
    return execFileSync('sh', ['-c', 'command -v tmux'], { encoding: 'utf8' }).trim()
  } catch {
    const msg = 'tmux is not installed (apt-get install tmux)'
    if (process.env.CI) throw new Error(msg)
    t.skip(msg)
    return null
  }
}

module.exports = { REDIS_URL, tmux, MYSQL_URL, PG_URL, answers, needRedis, needMysql, needPg, prefix, redisRaw, closeRaw, sleep, blackhole, eventually, freePort, shellEnv }
