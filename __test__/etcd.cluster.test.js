'use strict'
// etcd under faults, on a throwaway 3-member cluster (__test__/fixtures/etcd.js): its leader
// killed while three clients contend for a fenced resource, a holder cut off from every
// member behind a TCP proxy, and a holder whose member is left without a quorum.
const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { connect } = require('..')
const { prefix, sleep } = require('./helpers')
const { startEtcd, etcdInstalled } = require('./fixtures/etcd')
const { tcpProxy } = require('./fixtures/tcp-proxy')

const BOUND = { connectTimeout: 500, responseTimeout: 1000 }
let cluster = null

function need(t) {
  if (etcdInstalled()) return true
  const msg = 'etcd is not installed (apt-get install etcd-server)'
  if (process.env.CI) throw new Error(msg)
  t.skip(msg)
  return false
}

before(async () => { if (etcdInstalled()) cluster = await startEtcd({ members: 3 }) })
after(async () => { if (cluster) await cluster.stop() })

test('a cluster whose leader is killed under load keeps one holder at a time, accepts no stale write and answers every call within its bound', async (t) => {
  if (!need(t)) return
  const m = cluster.members
  // Three orders of the members: three clients with engines and connections of their own.
  const clients = await Promise.all([[0, 1, 2], [1, 2, 0], [2, 0, 1]].map((o) => connect(cluster.url(o.map((i) => m[i])), BOUND)))
  const k = `${prefix('etcd-cluster')}resource`
  const WAIT = 3000
  const resource = { busy: false, last: 0n, overlaps: 0, stale: 0, writes: 0, afterKill: 0, errors: 0, longest: 0 }
  let killed = false
  let stop = false
  const work = async (client) => {
    while (!stop) {
      const started = Date.now()
      let lock = null
      try {
        lock = await client.acquire(k, { ttl: 2000, wait: WAIT, retryDelay: 20 })
      } catch {
        resource.errors++
      }
      resource.longest = Math.max(resource.longest, Date.now() - started)
      if (lock === null) continue
      if (resource.busy) resource.overlaps++
      resource.busy = true
      // The fenced resource accepts a write only with a token above the last one it saw.
      if (lock.fencingToken <= resource.last) resource.stale++
      else resource.last = lock.fencingToken
      resource.writes++
      if (killed) resource.afterKill++
      await sleep(2)
      resource.busy = false
      const releasing = Date.now()
      await lock.release().catch(() => {})
      resource.longest = Math.max(resource.longest, Date.now() - releasing)
    }
  }
  const workers = clients.map(work)
  await sleep(1000)
  const leader = await cluster.leader()
  await leader.kill()
  killed = true
  const writesAtKill = resource.writes
  const deadline = Date.now() + 20000
  while (resource.afterKill < 20 && Date.now() < deadline) await sleep(50)
  stop = true
  await Promise.all(workers)
  await Promise.all(clients.map((c) => c.close()))
  leader.restart()
  assert.ok(writesAtKill > 0, 'sections before the kill')
  assert.ok(resource.afterKill >= 20, `sections after the kill: ${resource.afterKill}`)
  assert.equal(resource.overlaps, 0)
  assert.equal(resource.stale, 0)
  // The promised bound of a call: its wait, then one store call.
  assert.ok(resource.longest <= WAIT + BOUND.connectTimeout + BOUND.responseTimeout + 1000, `longest call ${resource.longest} ms`)
})

test('a holder cut off from every member hears of its loss before a client that reaches the quorum is granted its lock', async (t) => {
  if (!need(t)) return
  await cluster.leader()
  const [first, ...rest] = cluster.members
  const proxy = await tcpProxy(first.clientPort)
  const cutOff = await connect(`etcd://127.0.0.1:${proxy.port}`, { connectTimeout: 500, responseTimeout: 500 })
  const other = await connect(cluster.url(rest), BOUND)
  const k = `${prefix('etcd-cut')}lock`
  let lostAt = 0
  let lostReason = null
  const held = await cutOff.acquire(k, { ttl: 1000, autoExtend: true, onLost: (e) => { lostAt = Date.now(); lostReason = e.reason } })
  proxy.pause()
  const taken = await other.acquire(k, { ttl: 5000, wait: 15000, retryDelay: 50 })
  const grantedAt = Date.now()
  assert.ok(lostAt > 0, 'the cut-off holder was told')
  assert.ok(lostAt <= grantedAt, `told at ${lostAt}, the other granted at ${grantedAt}`)
  assert.equal(typeof lostReason, 'string')
  assert.equal(held.held, false)
  assert.ok(taken.fencingToken > held.fencingToken)
  await taken.release()
  await other.close()
  await cutOff.close().catch(() => {})
  await proxy.close()
})

test('a holder whose member lost its quorum is told of its loss before anyone is granted its lock, and the lock comes back with a higher token', async (t) => {
  if (!need(t)) return
  // Every member up again (an earlier spec kills and restarts some): `alone` must answer.
  await cluster.whole()
  const [alone, ...others] = cluster.members
  const minority = await connect(cluster.url([alone]), { connectTimeout: 500, responseTimeout: 500 })
  const k = `${prefix('etcd-minority')}lock`
  let lostAt = 0
  const held = await minority.acquire(k, { ttl: 1000, autoExtend: true, onLost: () => { lostAt = Date.now() } })
  // The other two members stop: the one left has no quorum, and refuses (no leader).
  await Promise.all(others.map((m) => m.kill()))
  const deadline = Date.now() + 10000
  while (lostAt === 0 && Date.now() < deadline) await sleep(20)
  assert.ok(lostAt > 0, 'the holder on the minority side was told')
  assert.equal(held.held, false)
  for (const m of others) m.restart()
  await cluster.leader()
  const majority = await connect(cluster.url(others), BOUND)
  const taken = await majority.acquire(k, { ttl: 5000, wait: 20000, retryDelay: 50 })
  assert.ok(taken.fencingToken > held.fencingToken)
  await taken.release()
  await majority.close()
  await minority.close().catch(() => {})
})

const b64 = (s) => Buffer.from(s).toString('base64')
/** The lock key of `name` as etcd holds it, or null. */
async function lockKey(name) {
  const r = await cluster.call('/v3/kv/range', { key: b64(`deadbolt/l/${name}`) })
  return r.kvs?.[0] ?? null
}

test('a grant applied after its request timed out ends with its own lease while its client keeps extending its other locks', async (t) => {
  if (!need(t)) return
  await cluster.leader()
  const proxy = await tcpProxy(cluster.members[0].clientPort)
  const late = await connect(`etcd://127.0.0.1:${proxy.port}`, { connectTimeout: 500, responseTimeout: 500 })
  const base = prefix('etcd-late-apply')
  // A lock of the same length, kept alive all along by the client's heartbeat.
  const kept = await late.acquire(`${base}kept`, { ttl: 1000, autoExtend: true, extendEvery: 200 })
  const k = `${base}late`
  // The acquisition (and the releases of its clean-up) reach etcd only later: the client
  // times out and gives up on the grant.
  proxy.holdRequest(b64(`deadbolt/l/${k}`))
  await assert.rejects(late.acquire(k, { ttl: 1000, wait: 0 }), { code: 'ERR_LOCK_BACKEND' })
  const deadline = Date.now() + 10000
  while (late.stats().cleanups > 0 && Date.now() < deadline) await sleep(20)
  assert.equal(late.stats().cleanups, 0, 'the clean-up gave up')
  // Now etcd reads the acquisition, and grants it to nobody that will ever extend it.
  assert.ok(proxy.deliverHeld() >= 1)
  const delivered = Date.now()
  // It ends by itself within its etcd lease (1.5 × ttl in whole seconds, from before the
  // request, and etcd's half-second check of its leases), whatever the client's other lock.
  const bound = 2000 + 500 + 1500
  let seen = false
  while (Date.now() - delivered < bound + 3000) {
    const kv = await lockKey(k)
    seen ||= kv !== null
    if (kv === null && Date.now() - delivered > 500) break
    await sleep(50)
  }
  const endedAfter = Date.now() - delivered
  assert.equal(await lockKey(k), null, `the late grant (seen: ${seen}) still exists ${endedAfter} ms after etcd read it`)
  assert.ok(endedAfter <= bound, `the late grant ended ${endedAfter} ms after etcd read it`)
  assert.equal(kept.held, true, 'the other lock was kept all along')
  await kept.release()
  await late.close()
  await proxy.close()
})

test('a holder whose key etcd deletes (its lease revoked, as a resuming old leader does) hears of its loss at once, and the next grant has a higher token', async (t) => {
  if (!need(t)) return
  await cluster.leader()
  // One URL and the same options: the two clients share one store and its watch. The holder
  // hears of the deletion on the watch or, if the other's poll reads it first and is granted
  // the key, at that grant (it once heard only at its next heartbeat, 3.3 s later). Across
  // members the holder hears when its own member applies the deletion, which may come after
  // the other's grant (a documented limit, seen at 131 ms under load: docs/guarantees.md).
  const holder = await connect(cluster.url(), BOUND)
  const other = await connect(cluster.url(), BOUND)
  const k = `${prefix('etcd-revoked')}lock`
  let lostAt = 0
  let lostReason = null
  // A long lease: its next heartbeat is seconds away.
  const held = await holder.acquire(k, { ttl: 10000, autoExtend: true, onLost: (e) => { lostAt = Date.now(); lostReason = e.reason } })
  const waiting = other.acquire(k, { ttl: 5000, wait: 15000 }).then((lock) => ({ lock, at: Date.now(), holderHeld: held.held }))
  const { lease } = await lockKey(k)
  const revokedAt = Date.now()
  await cluster.call('/v3/lease/revoke', { ID: lease })
  const taken = await waiting
  // Whether the holder read held === false by the other's grant is the documented limit
  // (docs/guarantees.md): the holder's loss and the other's grant are not ordered with each
  // other (full runs, 2026-12-07: the grant first, 9 and 13 ms after the revoke). What is
  // promised: the loss is heard at once, and the new grant's token is higher.
  if (taken.holderHeld) t.diagnostic(`the other was granted ${taken.at - revokedAt} ms after the revoke, before the holder heard of its loss`)
  while (lostAt === 0 && Date.now() - revokedAt < 5000) await sleep(10)
  assert.ok(lostAt > 0 && lostAt - revokedAt < 2000, `the loss was heard ${lostAt ? lostAt - revokedAt : 'never'} ms after the revoke`)
  assert.equal(lostReason, 'not-owned')
  assert.ok(taken.lock.fencingToken > held.fencingToken)
  await taken.lock.release()
  await other.close()
  await holder.close()
})
