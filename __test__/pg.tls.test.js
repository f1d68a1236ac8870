'use strict'
// TLS on PostgreSQL against a throwaway server with a private CA (made with openssl): the
// project's `tls` option maps onto sslmode verify-full, verify-ca or require. Roles the server
// lets in only over TLS (and, for one, only with a client certificate) prove the session is
// encrypted. A server that cannot be started skips these tests, except under CI.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { connect, LockBackendError } = require('..')
const { prefix } = require('./helpers')
const { makePki, removePki } = require('./fixtures/tls')
const { ThrowawayPostgres } = require('./fixtures/postgres')

let pki = null
let server = null
async function tlsPostgres(t) {
  try {
    if (server === null) {
      pki = makePki()
      if (pki === null) throw new Error('openssl is not installed')
      server = ThrowawayPostgres.create({
        port: 5470,
        tls: { cert: pki.serverCert, key: pki.serverKey, ca: pki.ca },
        // tls_user: TLS only; deadbolt-client: TLS with a client certificate whose CN is its name.
        hba: ['hostnossl all tls_user all reject', 'hostssl all tls_user all trust', 'hostssl all deadbolt-client all cert'],
      }).then(async (pg) => {
        await pg.start()
        const { Client } = require('pg')
        const c = new Client({ connectionString: pg.url })
        await c.connect()
        await c.query('CREATE ROLE tls_user LOGIN SUPERUSER; CREATE ROLE "deadbolt-client" LOGIN SUPERUSER')
        await c.end()
        return pg
      })
    }
    return await server
  } catch (err) {
    if (process.env.CI) throw err
    t.skip(`PostgreSQL with TLS unavailable: ${err.message.split('\n')[0]}`)
    return null
  }
}

after(async () => {
  const pg = await server?.catch(() => null)
  if (pg) await pg.destroy()
  removePki(pki)
})

async function lockRoundTrip(client) {
  const key = prefix('pgtls') + 'k'
  const lock = await client.acquire(key, { ttl: 5_000 })
  assert.equal((await client.inspect(key)).fencingToken, lock.fencingToken)
  assert.equal(await lock.release(), true)
}

test('postgres:// with tls: { ca } verifies the server (verify-full) and locks work over TLS', async (t) => {
  const pg = await tlsPostgres(t)
  if (!pg) return
  const client = await connect(`postgres://tls_user@127.0.0.1:${pg.port}/postgres`, { tls: { ca: pki.ca } })
  try {
    await lockRoundTrip(client)
  } finally {
    await client.close()
  }
})

test('postgres:// with tls but another CA fails with a LockBackendError (certificate not trusted)', async (t) => {
  const pg = await tlsPostgres(t)
  if (!pg) return
  const err = await connect(`postgres://tls_user@127.0.0.1:${pg.port}/postgres`, { tls: { ca: pki.otherCa }, connectTimeout: 2_000 })
    .then(() => assert.fail('connected'), (e) => e)
  assert.ok(err instanceof LockBackendError, `${err?.name}: ${err?.message}`)
  assert.match(`${err.message} ${err.cause?.message ?? ''}`, /certificate|UnknownIssuer/i)
})

test('rejectUnauthorized: false encrypts without verifying, and ?sslmode=verify-ca verifies the CA only', async (t) => {
  const pg = await tlsPostgres(t)
  if (!pg) return
  for (const [query, tls] of [['', { rejectUnauthorized: false }], ['?sslmode=verify-ca', { ca: pki.ca }]]) {
    const client = await connect(`postgres://tls_user@127.0.0.1:${pg.port}/postgres${query}`, { tls })
    try {
      await lockRoundTrip(client)
    } finally {
      await client.close()
    }
  }
})

test('the TLS-only role is refused without TLS (the control of the tests above)', async (t) => {
  const pg = await tlsPostgres(t)
  if (!pg) return
  const err = await connect(`postgres://tls_user@127.0.0.1:${pg.port}/postgres?sslmode=disable`, { connectTimeout: 2_000 })
    .then(() => assert.fail('connected'), (e) => e)
  assert.ok(err instanceof LockBackendError, `${err?.name}: ${err?.message}`)
})

test('mutual TLS: tls.cert and tls.key log in a role that the server authenticates by certificate', async (t) => {
  const pg = await tlsPostgres(t)
  if (!pg) return
  const url = `postgres://deadbolt-client@127.0.0.1:${pg.port}/postgres`
  const client = await connect(url, { tls: { ca: pki.ca, cert: pki.clientCert, key: pki.clientKey } })
  try {
    await lockRoundTrip(client)
  } finally {
    await client.close()
  }
  const err = await connect(url, { tls: { ca: pki.ca }, connectTimeout: 2_000 }).then(() => assert.fail('connected'), (e) => e)
  assert.ok(err instanceof LockBackendError, `${err?.name}: ${err?.message}`)
})
