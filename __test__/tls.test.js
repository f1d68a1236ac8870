'use strict'
// TLS to Redis (rediss://) and MySQL with a private CA, against real servers of our own: a
// throwaway CA and certificates made with openssl, a redis-server listening with TLS only, and
// a throwaway MariaDB with --ssl-ca/--ssl-cert/--ssl-key. A server that cannot be started
// fails the test under CI and skips it elsewhere.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const util = require('node:util')
const { connect, createLock, LockBackendError } = require('..')
const { makePki, removePki, TlsRedis } = require('./fixtures/tls')
const { ThrowawayMariadb } = require('./fixtures/mariadb')
const { startRedis } = require('./fixtures/redis-server')
const { prefix } = require('./helpers')

// ── fixtures, started on first use and stopped after the file ──

let pki
function getPki() {
  if (pki === undefined) {
    pki = makePki()
    if (pki === null) throw new Error('openssl is not installed (scripts/services.sh installs it)')
  }
  return pki
}

const started = new Map()
function once(name, start) {
  if (!started.has(name)) started.set(name, start())
  return started.get(name)
}

async function need(t, what, start) {
  try {
    return await start()
  } catch (err) {
    if (process.env.CI) throw err
    t.skip(`${what} unavailable: ${err.message.split('\n')[0]}`)
    return null
  }
}

const tlsRedis = (t) => need(t, 'redis-server with TLS', () => once('redis', () => TlsRedis.start(getPki(), { authClients: 'optional' })))
const mtlsRedis = (t) => need(t, 'redis-server requiring client certificates', () => once('redis-mtls', () => TlsRedis.start(getPki(), { authClients: 'yes' })))

const mariadb = (t) => need(t, 'MariaDB with TLS', () => once('mariadb', async () => {
  const p = getPki()
  const db = await ThrowawayMariadb.create({
    port: 3460,
    serverArgs: [`--ssl-ca=${p.paths.ca}`, `--ssl-cert=${p.paths.serverCert}`, `--ssl-key=${p.paths.serverKey}`],
  })
  try {
    await db.start()
    const mysql = require('mysql2/promise')
    const conn = await mysql.createConnection({ host: '127.0.0.1', port: db.port, user: 'root' })
    // Users the server only lets in over TLS (and, for the second, with a client certificate):
    // logging in as them proves the session is encrypted.
    await conn.query("CREATE USER 'tls_user'@'%' IDENTIFIED BY 'tls-pw' REQUIRE SSL")
    await conn.query("GRANT ALL ON test.* TO 'tls_user'@'%'")
    await conn.query("CREATE USER 'x509_user'@'%' IDENTIFIED BY 'x509-pw' REQUIRE X509")
    await conn.query("GRANT ALL ON test.* TO 'x509_user'@'%'")
    await conn.end()
  } catch (err) {
    await db.destroy()
    throw err
  }
  return db
}))

// Servers that do not speak TLS at all, for the handshake failures.
const plainRedis = (t) => need(t, 'a plaintext redis-server', () => once('redis-plain', async () => {
  const r = await startRedis()
  return { port: r.port, stop: () => r.kill() }
}))
const plainMariadb = (t) => need(t, 'MariaDB without TLS', () => once('mariadb-plain', async () => {
  const db = await ThrowawayMariadb.create({ port: 3520, serverArgs: ['--skip-ssl'] })
  try {
    await db.start()
  } catch (err) {
    await db.destroy()
    throw err
  }
  return db
}))

after(async () => {
  for (const p of started.values()) {
    const server = await p.catch(() => null)
    if (server instanceof ThrowawayMariadb) await server.destroy()
    else if (server) await server.stop()
  }
  removePki(pki ?? null)
})

/** A base64 line from the middle of a PEM: what must never show up in output. */
function bodyLine(pem) {
  const lines = pem.toString().trim().split('\n')
  return lines[Math.floor(lines.length / 2)]
}

async function lockRoundTrip(client) {
  const key = prefix('tls') + 'k'
  const lock = await client.acquire(key, { ttl: 5_000 })
  const info = await client.inspect(key)
  assert.equal(info.owner, lock.owner)
  assert.equal(info.fencingToken, lock.fencingToken)
  assert.equal(await lock.release(), true)
  assert.equal(await client.inspect(key), null)
}

async function rejectsWithin(promise, ms) {
  const start = performance.now()
  const err = await promise.then(() => assert.fail('expected a rejection'), (e) => e)
  const elapsed = performance.now() - start
  assert.ok(elapsed < ms, `took ${Math.round(elapsed)} ms, more than ${ms} ms`)
  return err
}

function untrusted(err) {
  assert.ok(err instanceof LockBackendError, `${err?.name}: ${err?.message}`)
  assert.match(`${err.message} ${err.cause?.message ?? ''}`, /certificate|UnknownIssuer/i)
}

// ── Redis ──

test('rediss:// with the private CA in tls.ca connects, and locks can be acquired, inspected and released', async (t) => {
  const redis = await tlsRedis(t)
  if (!redis) return
  const client = await connect(redis.url, { tls: { ca: getPki().ca } })
  try {
    await lockRoundTrip(client)
  } finally {
    await client.close()
  }
})

test('rediss:// with the CA as a string inside an array works as Node accepts it', async (t) => {
  const redis = await tlsRedis(t)
  if (!redis) return
  const client = await connect(redis.url, { tls: { ca: [getPki().otherCa.toString(), getPki().ca.toString()] } })
  await client.close()
})

test('rediss:// without the private CA fails with a LockBackendError (certificate not trusted) within connectTimeout', async (t) => {
  const redis = await tlsRedis(t)
  if (!redis) return
  const err = await rejectsWithin(connect(redis.url, { connectTimeout: 2_000 }), 2_000 + 500)
  untrusted(err)
})

test('a client trusting another CA does not share the connection of one trusting the right CA', async (t) => {
  const redis = await tlsRedis(t)
  if (!redis) return
  const good = await connect(redis.url, { tls: { ca: getPki().ca } })
  try {
    const err = await rejectsWithin(connect(redis.url, { tls: { ca: getPki().otherCa }, connectTimeout: 2_000 }), 2_500)
    untrusted(err)
  } finally {
    await good.close()
  }
})

test('rejectUnauthorized: false connects to rediss:// without verifying the certificate', async (t) => {
  const redis = await tlsRedis(t)
  if (!redis) return
  const client = await connect(redis.url, { tls: { rejectUnauthorized: false } })
  try {
    await lockRoundTrip(client)
  } finally {
    await client.close()
  }
})

test('a Redis server that requires client certificates accepts one given as tls.cert and tls.key', async (t) => {
  const redis = await mtlsRedis(t)
  if (!redis) return
  const { ca, clientCert, clientKey } = getPki()
  const client = await connect(redis.url, { tls: { ca, cert: clientCert, key: clientKey.toString() } })
  try {
    await lockRoundTrip(client)
  } finally {
    await client.close()
  }
})

test('a Redis server that requires client certificates refuses a client without one', async (t) => {
  const redis = await mtlsRedis(t)
  if (!redis) return
  const err = await rejectsWithin(connect(redis.url, { tls: { ca: getPki().ca }, connectTimeout: 2_000 }), 2_500)
  assert.ok(err instanceof LockBackendError, `${err.name}: ${err.message}`)
})

test('the redislock face works with an ioredis client configured with tls: { ca }', async (t) => {
  const redis = await tlsRedis(t)
  if (!redis) return
  const Redis = require('ioredis')
  const io = new Redis({ host: '127.0.0.1', port: redis.port, tls: { ca: getPki().ca }, lazyConnect: true })
  try {
    const lock = createLock(io, { timeout: 5_000 })
    await lock.acquire(prefix('tls-io') + 'k')
    await lock.release()
  } finally {
    io.disconnect()
  }
})

test('the redislock face works with a node-redis v5 client whose socket carries tls and ca', async (t) => {
  const redis = await tlsRedis(t)
  if (!redis) return
  const { createClient } = require('redis')
  const nr = createClient({ socket: { host: '127.0.0.1', port: redis.port, tls: true, ca: getPki().ca } })
  const lock = createLock(nr, { timeout: 5_000 })
  await lock.acquire(prefix('tls-nr5') + 'k')
  await lock.release()
})

test('the redislock face works with a node_redis v3 client configured with tls: { ca }', async (t) => {
  const redis = await tlsRedis(t)
  if (!redis) return
  const redis3 = require('redis3')
  const nr = redis3.createClient({ host: '127.0.0.1', port: redis.port, tls: { ca: getPki().ca } })
  nr.on('error', () => {})
  try {
    const lock = createLock(nr, { timeout: 5_000 })
    await lock.acquire(prefix('tls-nr3') + 'k')
    await lock.release()
  } finally {
    nr.end(false)
  }
})

test('the redislock face does not reuse a connection trusted through another CA', async (t) => {
  const redis = await tlsRedis(t)
  if (!redis) return
  const good = createLock({ host: '127.0.0.1', port: redis.port, tls: { ca: getPki().ca } })
  await good.acquire(prefix('tls-face') + 'k')
  await good.release()
  const bad = createLock({ host: '127.0.0.1', port: redis.port, tls: { ca: getPki().otherCa } })
  const err = await bad.acquire(prefix('tls-face') + 'k').then(() => assert.fail('expected a rejection'), (e) => e)
  assert.equal(err.name, 'LockAcquisitionError')
  assert.match(err.message, /certificate|UnknownIssuer/i)
})

test('rediss:// to a plaintext Redis fails within connectTimeout, saying the TLS handshake failed, with a cause code', async (t) => {
  const redis = await plainRedis(t)
  if (!redis) return
  // Without options.tls (redis-rs's own TLS set-up) and with it (a client of ours).
  for (const options of [{}, { tls: { rejectUnauthorized: false } }]) {
    const err = await rejectsWithin(connect(`rediss://127.0.0.1:${redis.port}`, { connectTimeout: 2_000, responseTimeout: 30_000, ...options }), 2_000 + 500)
    assert.ok(err instanceof LockBackendError, `${err.name}: ${err.message}`)
    assert.match(err.message, /TLS handshake with 127\.0\.0\.1:\d+ failed/)
    assert.match(err.cause.message, /does not speak TLS/)
    assert.equal(err.cause.code, 'ERR_LOCK_STORE_UNREACHABLE')
  }
})

test('an acquisition on a lazy rediss:// client to a plaintext Redis fails the same way, within connectTimeout', async (t) => {
  const redis = await plainRedis(t)
  if (!redis) return
  const client = await connect(`rediss://127.0.0.1:${redis.port}`, { connectTimeout: 2_000, responseTimeout: 30_000, lazy: true })
  try {
    const err = await rejectsWithin(client.acquire(prefix('tls') + 'k', { ttl: 1_000 }), 2_000 + 500)
    assert.ok(err instanceof LockBackendError, `${err.name}: ${err.message}`)
    assert.match(err.message, /TLS handshake/)
    assert.equal(err.cause.code, 'ERR_LOCK_STORE_UNREACHABLE')
  } finally {
    await client.close()
  }
})

// ── MySQL ──

test('MySQL with tls: { ca } connects as a user that requires SSL, and locks work', async (t) => {
  const db = await mariadb(t)
  if (!db) return
  const client = await connect(`mysql://tls_user:tls-pw@127.0.0.1:${db.port}/test`, { tls: { ca: getPki().ca } })
  try {
    await lockRoundTrip(client)
  } finally {
    await client.close()
  }
})

test('the MySQL user that requires SSL is refused over an unencrypted connection', async (t) => {
  const db = await mariadb(t)
  if (!db) return
  const err = await rejectsWithin(connect(`mysql://tls_user:tls-pw@127.0.0.1:${db.port}/test?ssl-mode=disabled`, { connectTimeout: 2_000 }), 2_500)
  assert.ok(err instanceof LockBackendError, `${err.name}: ${err.message}`)
  assert.match(err.message, /Access denied/)
})

test('MySQL with tls but without the private CA fails with a LockBackendError (certificate not trusted)', async (t) => {
  const db = await mariadb(t)
  if (!db) return
  const err = await rejectsWithin(connect(`mysql://tls_user:tls-pw@127.0.0.1:${db.port}/test`, { tls: {}, connectTimeout: 2_000 }), 2_500)
  untrusted(err)
})

test('MySQL with tls against a server without TLS fails at once, saying the server does not support TLS, with a cause code', async (t) => {
  const db = await plainMariadb(t)
  if (!db) return
  for (const [url, options] of [[`${db.url}?ssl-mode=required`, {}], [db.url, { tls: { rejectUnauthorized: false } }]]) {
    const err = await rejectsWithin(connect(url, { connectTimeout: 2_000, ...options }), 2_000 + 500)
    assert.ok(err instanceof LockBackendError, `${err.name}: ${err.message}`)
    assert.match(err.message, /TLS connection: server does not support TLS/)
    assert.equal(err.cause.code, 'ERR_LOCK_STORE_UNREACHABLE')
  }
})

test('MySQL mutual TLS with tls.cert and tls.key works for a user that requires X509', async (t) => {
  const db = await mariadb(t)
  if (!db) return
  const { ca, clientCert, clientKey } = getPki()
  const url = `mysql://x509_user:x509-pw@127.0.0.1:${db.port}/test`
  const client = await connect(url, { tls: { ca, cert: clientCert, key: clientKey } })
  try {
    await lockRoundTrip(client)
  } finally {
    await client.close()
  }
  const err = await rejectsWithin(connect(url, { tls: { ca }, connectTimeout: 2_000 }), 2_500)
  assert.match(err.message, /Access denied/)
})

test('MySQL with ?ssl-mode=verify_ca in the URL and tls.ca verifies against the CA', async (t) => {
  const db = await mariadb(t)
  if (!db) return
  const url = `mysql://tls_user:tls-pw@127.0.0.1:${db.port}/test?ssl-mode=verify_ca`
  const client = await connect(url, { tls: { ca: getPki().ca } })
  await client.close()
  untrusted(await rejectsWithin(connect(url, { tls: { ca: getPki().otherCa }, connectTimeout: 2_000 }), 2_500))
})

// ── bad input: TypeErrors before any I/O, never echoing the material ──

test('TLS material that is not PEM is a TypeError naming the option, without quoting it', async () => {
  const secret = 'SECRET-MATERIAL-' + 'x'.repeat(40)
  // Port 1: nothing listens there, so an I/O attempt would fail differently.
  for (const [tls, name, code] of [
    [{ ca: secret }, 'options.tls.ca', 'ERR_INVALID_ARG_VALUE'],
    [{ ca: [secret] }, 'options.tls.ca[0]', 'ERR_INVALID_ARG_VALUE'],
    [{ ca: 42 }, 'options.tls.ca', 'ERR_INVALID_ARG_TYPE'],
    [{ cert: Buffer.from(secret), key: Buffer.from(secret) }, 'options.tls.cert', 'ERR_INVALID_ARG_VALUE'],
    [{ servername: 7 }, 'options.tls.servername', 'ERR_INVALID_ARG_TYPE'],
    [{ rejectUnauthorized: 'no' }, 'options.tls.rejectUnauthorized', 'ERR_INVALID_ARG_TYPE'],
    [{ passphrase: secret }, 'options.tls.passphrase', 'ERR_INVALID_ARG_VALUE'],
    ['yes', 'options.tls', 'ERR_INVALID_ARG_TYPE'],
  ]) {
    const err = await connect('rediss://127.0.0.1:1', { tls }).then(() => assert.fail('accepted'), (e) => e)
    assert.ok(err instanceof TypeError, `${name}: ${err}`)
    assert.equal(err.code, code, name)
    assert.ok(err.message.includes(`'${name}'`) || err.message.includes(`"${name}"`), err.message)
    assert.ok(!err.message.includes('SECRET'), err.message)
  }
})

test('a private key that is not readable is a TypeError that does not quote the key', async () => {
  const { ca, clientCert, clientKey } = getPki()
  const broken = clientKey.toString().replace(bodyLine(clientKey), 'AAAA' + bodyLine(clientKey).slice(4, -4) + '!!!!')
  const err = await connect('rediss://127.0.0.1:1', { tls: { ca, cert: clientCert, key: broken } }).then(() => assert.fail('accepted'), (e) => e)
  assert.ok(err instanceof TypeError)
  assert.equal(err.code, 'ERR_INVALID_ARG_VALUE')
  assert.match(err.message, /options\.tls\.key/)
  assert.ok(!err.message.includes(bodyLine(clientKey).slice(4, -4)), err.message)
})

test('tls with a URL that has no TLS (redis://, memory://) is a TypeError', async () => {
  for (const url of ['redis://127.0.0.1:1', 'memory://tls-test']) {
    const err = await connect(url, { tls: {} }).then(() => assert.fail('accepted'), (e) => e)
    assert.ok(err instanceof TypeError, `${url}: ${err}`)
    assert.equal(err.code, 'ERR_INVALID_ARG_VALUE')
    assert.match(err.message, /options\.tls/)
  }
})

test('a servername other than the URL host is a TypeError, for Redis and for MySQL', async () => {
  for (const url of ['rediss://127.0.0.1:1', 'mysql://root@127.0.0.1:1/test']) {
    const err = await connect(url, { tls: { servername: 'db.internal' }, lazy: true }).then(() => assert.fail('accepted'), (e) => e)
    assert.ok(err instanceof TypeError, `${url}: ${err}`)
    assert.equal(err.code, 'ERR_INVALID_ARG_VALUE')
    assert.match(err.message, /options\.tls\.servername/)
  }
  const same = await connect('rediss://localhost:1', { tls: { servername: 'localhost' }, lazy: true })
  await same.close()
})

test('an ssl-mode in the MySQL URL that contradicts options.tls is a TypeError', async () => {
  for (const [query, tls] of [
    ['ssl-mode=disabled', {}],
    ['ssl-mode=required', {}],
    ['ssl-mode=preferred', {}],
    ['ssl-mode=verify_ca', { rejectUnauthorized: false }],
    ['ssl-ca=/tmp/ca.pem', { ca: getPki().ca }],
  ]) {
    const err = await connect(`mysql://root@127.0.0.1:1/test?${query}`, { tls, lazy: true }).then(() => assert.fail(`${query} accepted`), (e) => e)
    assert.ok(err instanceof TypeError, `${query}: ${err}`)
    assert.equal(err.code, 'ERR_INVALID_ARG_VALUE')
  }
  const ok = await connect('mysql://root@127.0.0.1:1/test?ssl-mode=required', { tls: { rejectUnauthorized: false }, lazy: true })
  await ok.close()
})

test('TLS material shows up neither in util.inspect nor in JSON of a client', async (t) => {
  const redis = await mtlsRedis(t)
  if (!redis) return
  const { ca, clientCert, clientKey } = getPki()
  const client = await connect(redis.url, { tls: { ca, cert: clientCert, key: clientKey } })
  try {
    const shown = util.inspect(client, { depth: Infinity, showHidden: true }) + JSON.stringify(client, (k, v) => (typeof v === 'bigint' ? String(v) : v))
    for (const pem of [ca, clientCert, clientKey]) assert.ok(!shown.includes(bodyLine(pem)), 'material printed')
  } finally {
    await client.close()
  }
})
