'use strict'
// Errors that say what failed: refused credentials (ERR_LOCK_STORE_AUTH) and an unknown
// database (ERR_LOCK_STORE_NO_DATABASE) have cause codes of their own on every store, apart
// from a server that is down (ERR_LOCK_STORE_UNREACHABLE); connection errors name the server
// (host:port), never the password, and say they were connecting. The shared servers are only
// read from: a throwaway redis-server stands for one with a password, and the SQL servers are
// given an account or a database they do not have.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const { connect, LockBackendError } = require('..')
const { MYSQL_URL, PG_URL, REDIS_URL, needRedis, needMysql, needPg, freePort } = require('./helpers')
const { startRedisServers } = require('./fixtures/redis-server')

/** The rejection of connecting to `url`, failing if it connects. */
async function connectError(url, connectTimeout = 3_000) {
  const err = await connect(url, { connectTimeout }).then(
    (c) => c.close().then(() => assert.fail(`connected to ${url}`)),
    (e) => e,
  )
  assert.ok(err instanceof LockBackendError, err.stack)
  return err
}

/** Everything an error says: its message and its cause's. */
const text = (err) => `${err.message} | ${err.cause?.message}`

/** A throwaway redis-server that wants `password` (set once it answers). */
async function redisWithPassword(t, password) {
  const servers = await startRedisServers(t, 1)
  if (servers === null) return null
  const [server] = servers
  const Redis = require('ioredis')
  const raw = new Redis(server.port, { lazyConnect: true })
  await raw.connect()
  await raw.config('SET', 'requirepass', password)
  raw.disconnect()
  return server
}

test('a wrong Redis password fails with ERR_LOCK_STORE_AUTH naming host:port and not the password', async (t) => {
  const server = await redisWithPassword(t, 'R1ghtPassw0rd')
  if (server === null) return
  try {
    const err = await connectError(`redis://:Wr0ngPassw0rd@127.0.0.1:${server.port}`)
    assert.equal(err.cause.code, 'ERR_LOCK_STORE_AUTH', text(err))
    assert.ok(text(err).includes(`127.0.0.1:${server.port}`), text(err))
    assert.ok(!text(err).includes('Wr0ngPassw0rd') && !text(err).includes('R1ghtPassw0rd'), text(err))
  } finally {
    await server.kill()
  }
})

test('no password for a Redis that wants one fails with ERR_LOCK_STORE_AUTH', async (t) => {
  const server = await redisWithPassword(t, 'R1ghtPassw0rd')
  if (server === null) return
  try {
    const err = await connectError(`redis://127.0.0.1:${server.port}`)
    assert.equal(err.cause.code, 'ERR_LOCK_STORE_AUTH', text(err))
  } finally {
    await server.kill()
  }
})

test('a Redis database index the server does not have fails with ERR_LOCK_STORE_NO_DATABASE', async (t) => {
  if (!(await needRedis(t))) return
  // The shared server has the default 16 databases.
  const err = await connectError('redis://127.0.0.1:6379/999')
  assert.equal(err.cause.code, 'ERR_LOCK_STORE_NO_DATABASE', text(err))
  assert.ok(text(err).includes('127.0.0.1:6379'), text(err))
})

test('a Redis that is not there fails with ERR_LOCK_STORE_UNREACHABLE naming host:port', async () => {
  const port = await freePort()
  const err = await connectError(`redis://:S3cretPw@127.0.0.1:${port}`)
  assert.equal(err.cause.code, 'ERR_LOCK_STORE_UNREACHABLE', text(err))
  assert.ok(text(err).includes(`127.0.0.1:${port}`), text(err))
  assert.ok(!text(err).includes('S3cretPw'), text(err))
})

test('a wrong MySQL password fails with ERR_LOCK_STORE_AUTH, as connecting, naming host:port and not the password', async (t) => {
  if (!(await needMysql(t))) return
  const url = new URL(MYSQL_URL)
  url.password = 'Wr0ngPassw0rd'
  const err = await connectError(url.href)
  assert.equal(err.cause.code, 'ERR_LOCK_STORE_AUTH', text(err))
  assert.match(err.cause.message, new RegExp(`connecting to ${url.hostname.replace(/\./g, '\\.')}:${url.port || 3306}`))
  assert.doesNotMatch(text(err), /creating the lock table/)
  assert.ok(!text(err).includes('Wr0ngPassw0rd'), text(err))
})

test('an unknown MySQL database fails with ERR_LOCK_STORE_NO_DATABASE', async (t) => {
  if (!(await needMysql(t))) return
  const url = new URL(MYSQL_URL)
  url.pathname = '/deadbolt_no_such_database'
  const err = await connectError(url.href)
  assert.equal(err.cause.code, 'ERR_LOCK_STORE_NO_DATABASE', text(err))
  assert.doesNotMatch(text(err), /creating the lock table/)
})

test('an unknown PostgreSQL user fails with ERR_LOCK_STORE_AUTH, as connecting, naming host:port', async (t) => {
  if (!(await needPg(t))) return
  const url = new URL(PG_URL)
  url.username = 'deadbolt_no_such_role'
  url.password = 'Wr0ngPassw0rd'
  const err = await connectError(url.href)
  assert.equal(err.cause.code, 'ERR_LOCK_STORE_AUTH', text(err))
  assert.match(err.cause.message, new RegExp(`connecting to ${url.hostname.replace(/\./g, '\\.')}:${url.port || 5432}`))
  assert.ok(!text(err).includes('Wr0ngPassw0rd'), text(err))
})

test('an unknown PostgreSQL database fails with ERR_LOCK_STORE_NO_DATABASE', async (t) => {
  if (!(await needPg(t))) return
  const url = new URL(PG_URL)
  url.pathname = '/deadbolt_no_such_database'
  const err = await connectError(url.href)
  assert.equal(err.cause.code, 'ERR_LOCK_STORE_NO_DATABASE', text(err))
})

/**
 * A throwaway HTTP server on a free port; its port. Node's answers 400 to bytes that are no
 * request, and closes a connection its client closed.
 */
async function httpPort(t) {
  const server = http.createServer((req, res) => res.end('hello'))
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.after(() => {
    server.closeAllConnections()
    server.close()
  })
  return server.address().port
}

/** The host:port of a shared server's URL. */
const address = (url, port) => `${new URL(url).hostname}:${new URL(url).port || port}`

// A connect timeout far beyond what a test waits: a wrong port must be told from the answer,
// not from the silence (which would fail as ERR_LOCK_STORE_TIMEOUT).
const LONG = 60_000

/** Fails unless `err` says, in words, that the server at `where` speaks another protocol. */
function assertWrongProtocol(err, where, who) {
  assert.equal(err.cause.code, 'ERR_LOCK_STORE_PROTOCOL', text(err))
  assert.ok(text(err).includes(where), text(err))
  if (who !== undefined) assert.ok(text(err).includes(who), text(err))
  // No parser's bytes, driver's kind names or source places.
  assert.doesNotMatch(text(err), /sqlx|::|Parse|at line|Unexpected|- [A-Z][a-z]+[A-Z]/, text(err))
}

test('a redis:// URL at an HTTP port fails with ERR_LOCK_STORE_PROTOCOL naming host:port and the HTTP server', async (t) => {
  const port = await httpPort(t)
  const err = await connectError(`redis://127.0.0.1:${port}`, LONG)
  assertWrongProtocol(err, `127.0.0.1:${port}`, 'HTTP server')
})

test('a redis:// URL at the MySQL port fails with ERR_LOCK_STORE_PROTOCOL naming host:port and MySQL', async (t) => {
  if (!(await needMysql(t))) return
  const where = address(MYSQL_URL, 3306)
  const err = await connectError(`redis://${where}`, LONG)
  assertWrongProtocol(err, where, 'MySQL or MariaDB server')
})

test('a mysql:// URL at an HTTP port fails with ERR_LOCK_STORE_PROTOCOL naming host:port', async (t) => {
  const port = await httpPort(t)
  const err = await connectError(`mysql://root@127.0.0.1:${port}/test`, LONG)
  assertWrongProtocol(err, `127.0.0.1:${port}`)
})

test('a mysql:// URL at the Redis port fails with ERR_LOCK_STORE_PROTOCOL naming host:port', async (t) => {
  if (!(await needRedis(t))) return
  const where = address(REDIS_URL, 6379)
  const err = await connectError(`mysql://root@${where}/test`, LONG)
  assertWrongProtocol(err, where)
})

test('a postgres:// URL at an HTTP port fails with ERR_LOCK_STORE_PROTOCOL naming host:port', async (t) => {
  const port = await httpPort(t)
  const err = await connectError(`postgres://postgres@127.0.0.1:${port}/test`, LONG)
  assertWrongProtocol(err, `127.0.0.1:${port}`)
})

test('a postgres:// URL at the MySQL port fails with ERR_LOCK_STORE_PROTOCOL naming host:port', async (t) => {
  if (!(await needMysql(t))) return
  const where = address(MYSQL_URL, 3306)
  const err = await connectError(`postgres://postgres@${where}/test`, LONG)
  assertWrongProtocol(err, where)
})

test("a refused Redis login's message is in words, without the driver's name of its kind", async (t) => {
  const server = await redisWithPassword(t, 'R1ghtPassw0rd')
  if (server === null) return
  try {
    const err = await connectError(`redis://:Wr0ngPassw0rd@127.0.0.1:${server.port}`)
    assert.equal(err.cause.code, 'ERR_LOCK_STORE_AUTH', text(err))
    assert.doesNotMatch(text(err), /AuthenticationFailed/, text(err))
  } finally {
    await server.kill()
  }
})

test('an etcd that is not there fails with ERR_LOCK_STORE_UNREACHABLE naming host:port, without waiting for the timeouts', { timeout: 30_000 }, async () => {
  const port = await freePort()
  const err = await connectError(`etcd://127.0.0.1:${port}`, LONG)
  assert.equal(err.cause.code, 'ERR_LOCK_STORE_UNREACHABLE', text(err))
  assert.ok(text(err).includes(`127.0.0.1:${port}`), text(err))
  assert.doesNotMatch(text(err), /os error|tcp connect error|client error/, text(err))
})
