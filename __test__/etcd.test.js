'use strict'
// etcd beyond the shared suite: its auth (a user and password in the URL) and etcds:// with the
// TLS options the other stores take, each on a throwaway member of its own.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const util = require('node:util')
const { connect } = require('..')
const { prefix } = require('./helpers')
const { startEtcd, etcdInstalled } = require('./fixtures/etcd')
const { makePki, removePki } = require('./fixtures/tls')

const started = []
after(async () => { await Promise.all(started.map((c) => c.stop())) })

function need(t, what = etcdInstalled()) {
  if (what) return true
  const msg = 'etcd (apt-get install etcd-server) or openssl is not installed'
  if (process.env.CI) throw new Error(msg)
  t.skip(msg)
  return false
}

const PASSWORD = 'S3cr3t@etcd pw'

test('a user and password in the URL log in to etcd, and neither a wrong password nor the right one ever shows', async (t) => {
  if (!need(t)) return
  const c = await startEtcd()
  started.push(c)
  for (const [p, body] of [
    ['/v3/auth/user/add', { name: 'root', password: PASSWORD }],
    ['/v3/auth/role/add', { name: 'root' }],
    ['/v3/auth/user/grant', { user: 'root', role: 'root' }],
    ['/v3/auth/enable', {}],
  ]) await c.call(p, body)
  const member = c.members[0].endpoint
  const good = await connect(`etcd://root:${encodeURIComponent(PASSWORD)}@${member}`)
  const k = `${prefix('etcd-auth')}k`
  const lock = await good.acquire(k)
  assert.equal((await good.inspect(k)).owner, lock.owner)
  await lock.release()
  assert.ok(!util.inspect(good, { depth: 10 }).includes('S3cr3t'))
  await good.close()
  // connect() asks the store once: a wrong password, or none while auth is on, fails there.
  const err = await connect(`etcd://root:${encodeURIComponent('not-the-S3cr3t')}@${member}`).then(() => null, (e) => e)
  assert.equal(err?.code, 'ERR_LOCK_BACKEND')
  assert.equal(err.cause.code, 'ERR_LOCK_STORE_AUTH')
  assert.ok(!util.inspect(err, { depth: 10 }).includes('S3cr3t'), util.inspect(err))
  // Without a user, etcd answers the status that connect() asks, and refuses the lock.
  const none = await connect(`etcd://${member}`)
  const refused = await none.tryAcquire(k).then(() => null, (e) => e)
  assert.equal(refused?.cause?.code, 'ERR_LOCK_STORE_AUTH')
  await none.close()
})

test('etcds:// trusts a member whose certificate options.tls.ca signed, and no other', async (t) => {
  const pki = makePki()
  if (!need(t, etcdInstalled() && pki !== null)) return
  t.after(() => removePki(pki))
  const c = await startEtcd({
    tls: { certFile: pki.paths.serverCert, keyFile: pki.paths.serverKey },
  })
  started.push(c)
  const url = c.url()
  assert.match(url, /^etcds:\/\//)
  const k = `${prefix('etcd-tls')}k`
  const ok = await connect(url, { tls: { ca: pki.ca, cert: pki.clientCert, key: pki.clientKey } })
  const lock = await ok.acquire(k)
  await lock.release()
  await ok.close()
  const plain = await connect(url, { tls: { ca: pki.ca } })
  assert.equal(await plain.tryAcquire(k).then((l) => l.release()), true)
  await plain.close()
  // A member whose certificate another CA signed is not trusted.
  const untrusted = await connect(url, { tls: { ca: pki.otherCa, cert: pki.clientCert, key: pki.clientKey }, connectTimeout: 5000, responseTimeout: 5000 }).then(() => null, (e) => e)
  assert.equal(untrusted?.code, 'ERR_LOCK_BACKEND')
  assert.equal(untrusted.cause.code, 'ERR_LOCK_STORE_UNREACHABLE')
  // TLS options need an etcds:// URL.
  await assert.rejects(connect(url.replace('etcds://', 'etcd://'), { tls: { ca: pki.ca } }), (e) => e.code === 'ERR_INVALID_ARG_VALUE')
})
