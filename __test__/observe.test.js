'use strict'
// The diagnostics channels (lib/observe.js): what each primitive publishes on
// node:diagnostics_channel, with the context objects index.d.ts documents. The embedded store:
// what is published does not depend on the store.

const test = require('node:test')
const assert = require('node:assert/strict')
const dc = require('node:diagnostics_channel')
const { connect } = require('..')
const { prefix, eventually, freePort } = require('./helpers')

const EVENTS = ['start', 'end', 'asyncStart', 'asyncEnd', 'error']

/** Records every event of tracing channel `deadbolt:<name>` as [event, snapshot of the context]. */
function record(t, name) {
  const seen = []
  const tc = dc.tracingChannel(`deadbolt:${name}`)
  const handlers = Object.fromEntries(EVENTS.map((e) => [e, (ctx) => seen.push([e, { ...ctx }])]))
  tc.subscribe(handlers)
  t.after(() => tc.unsubscribe(handlers))
  return seen
}

/** Records the messages of plain channel `deadbolt:<name>`. */
function listen(t, name) {
  const seen = []
  const fn = (msg) => seen.push(msg)
  dc.subscribe(`deadbolt:${name}`, fn)
  t.after(() => dc.unsubscribe(`deadbolt:${name}`, fn))
  return seen
}

async function client(t) {
  const locks = await connect(`memory://observe-${prefix('m')}`)
  t.after(() => locks.close())
  return locks
}

const settled = (seen) => seen.filter(([e]) => e === 'asyncEnd').map(([, c]) => c)

test('a granted acquisition publishes start, end, asyncStart and asyncEnd with the documented context', async (t) => {
  const seen = record(t, 'acquire')
  const locks = await client(t)
  const key = prefix('obs') + 'a'
  const lock = await locks.acquire(key, { ttl: 5000 })
  assert.deepEqual(seen.map(([e]) => e), ['start', 'end', 'asyncStart', 'asyncEnd'])
  const [, start] = seen[0]
  assert.equal(start.key, key)
  assert.equal(start.store, 'memory')
  assert.equal(start.kind, 'lock')
  assert.equal(start.ttl, 5000)
  assert.equal(start.owner, lock.owner)
  assert.equal(start.permits, 1)
  assert.equal(start.result, undefined)
  const [done] = settled(seen)
  assert.equal(done.result, 'granted')
  assert.equal(done.fencingToken, lock.fencingToken)
  assert.equal(done.lock, lock)
  assert.ok(typeof done.waitedMs === 'number' && done.waitedMs >= 0)
  await lock.release()
})

test('a tryAcquire of a busy key is reported refused', async (t) => {
  const locks = await client(t)
  const key = prefix('obs') + 'busy'
  const held = await locks.acquire(key)
  const seen = record(t, 'acquire')
  assert.equal(await locks.tryAcquire(key), null)
  assert.equal(settled(seen)[0].result, 'refused')
  assert.equal(seen.some(([e]) => e === 'error'), false)
  await held.release()
})

test('an acquisition whose wait runs out is reported timeout, on the error event too', async (t) => {
  const locks = await client(t)
  const key = prefix('obs') + 'timeout'
  const held = await locks.acquire(key)
  const seen = record(t, 'acquire')
  await assert.rejects(locks.acquire(key, { wait: 20 }), { code: 'ERR_LOCK_ACQUISITION' })
  const [error] = seen.filter(([e]) => e === 'error').map(([, c]) => c)
  assert.equal(error.error.code, 'ERR_LOCK_ACQUISITION')
  assert.equal(settled(seen)[0].result, 'timeout')
  await held.release()
})

test('an acquisition whose signal fires is reported aborted', async (t) => {
  const locks = await client(t)
  const key = prefix('obs') + 'abort'
  const held = await locks.acquire(key)
  const seen = record(t, 'acquire')
  const ac = new AbortController()
  const waiting = locks.acquire(key, { wait: 60_000, signal: ac.signal })
  ac.abort()
  await assert.rejects(waiting)
  assert.equal(settled(seen)[0].result, 'aborted')
  await held.release()
})

test('semaphore permits and read and write holds are reported with their kind and permits', async (t) => {
  const locks = await client(t)
  const seen = record(t, 'acquire')
  const sem = locks.semaphore(prefix('obs') + 'sem', { limit: 3 })
  const permit = await sem.acquire({ permits: 2 })
  await permit.release()
  const rw = locks.readWriteLock(prefix('obs') + 'rw')
  await (await rw.read()).release()
  await (await rw.write()).release()
  assert.deepEqual(settled(seen).map((c) => [c.kind, c.result]), [['semaphore', 'granted'], ['read', 'granted'], ['write', 'granted']])
  assert.equal(settled(seen)[0].permits, 2)
  assert.equal(settled(seen)[1].permits, 1)
})

test('acquireAll is reported as one acquisition per key', async (t) => {
  const locks = await client(t)
  const seen = record(t, 'acquire')
  const p = prefix('obs')
  const all = await locks.acquireAll([p + 'b', p + 'a'])
  assert.deepEqual(settled(seen).map((c) => c.key), [p + 'a', p + 'b'])
  await all.release()
})

test('an election campaign is an acquisition of kind election', async (t) => {
  const locks = await client(t)
  const seen = record(t, 'acquire')
  const election = locks.elect(prefix('obs') + 'e', { ttl: 3000 })
  await eventually(() => election.isLeader, 5000, 'leadership')
  await election.resign()
  assert.equal(settled(seen)[0].kind, 'election')
  assert.equal(settled(seen)[0].result, 'granted')
})

test('the leader channel says when a candidate gains and gives up leadership', async (t) => {
  const locks = await client(t)
  const seen = listen(t, 'leader')
  const name = prefix('obs') + 'lead'
  const election = locks.elect(name, { ttl: 3000 })
  await eventually(() => election.isLeader, 5000, 'leadership')
  const term = election.term
  await election.resign()
  assert.deepEqual(seen.map((m) => [m.key, m.leader, m.term, m.reason]), [[name, true, term, null], [name, false, term, 'resigned']])
})

test('a release publishes its result and how long the lock was held', async (t) => {
  const locks = await client(t)
  const seen = record(t, 'release')
  const key = prefix('obs') + 'rel'
  const lock = await locks.acquire(key)
  assert.equal(await lock.release(), true)
  assert.deepEqual(seen.map(([e]) => e), ['start', 'end', 'asyncStart', 'asyncEnd'])
  const [done] = settled(seen)
  assert.equal(done.key, key)
  assert.equal(done.result, 'released')
  assert.equal(done.lock, lock)
  assert.ok(typeof done.heldMs === 'number' && done.heldMs >= 0)
})

test('close() publishes a release for every lock it lets go of', async (t) => {
  const locks = await connect(`memory://observe-${prefix('m')}`)
  const seen = record(t, 'release')
  const key = prefix('obs') + 'closed'
  await locks.acquire(key)
  await locks.close()
  const [done] = settled(seen)
  assert.equal(done.key, key)
  assert.equal(done.closed, true)
})

test('extend() publishes an extension that is not a heartbeat', async (t) => {
  const locks = await client(t)
  const seen = record(t, 'extend')
  const lock = await locks.acquire(prefix('obs') + 'ext')
  await lock.extend(7000)
  const [done] = settled(seen)
  assert.equal(done.result, 'extended')
  assert.equal(done.heartbeat, false)
  assert.equal(done.ttl, 7000)
  await lock.release()
})

test('each heartbeat of an auto-extended lock is published as an extension', async (t) => {
  const locks = await client(t)
  const seen = record(t, 'extend')
  const lock = await locks.acquire(prefix('obs') + 'beat', { ttl: 300, autoExtend: true, extendEvery: 20 })
  await eventually(() => settled(seen).length >= 2, 5000, 'two heartbeats')
  const beats = settled(seen)
  assert.ok(beats.every((c) => c.heartbeat === true && c.result === 'extended' && c.lock === lock))
  await lock.release()
})

test('a lost lock is published with its cause and how long it was held', async (t) => {
  const locks = await client(t)
  const seen = listen(t, 'lost')
  const key = prefix('obs') + 'lost'
  const lock = await locks.acquire(key, { ttl: 30, onLost: () => {} })
  await eventually(() => seen.length === 1, 5000, 'the loss')
  assert.equal(seen[0].key, key)
  assert.equal(seen[0].cause, 'expired')
  assert.equal(seen[0].lock, lock)
  assert.equal(seen[0].error.code, 'ERR_LOCK_LOST')
  assert.ok(seen[0].heldMs >= 0)
  assert.equal(seen[0].stopped, false)
})

test('a lease its holder stopped extending is published as lost with stopped: true when it lapses', async (t) => {
  const locks = await client(t)
  const seen = listen(t, 'lost')
  const lock = await locks.acquire(prefix('obs') + 'stopped', { ttl: 200, autoExtend: true, onLost: () => {} })
  lock.stopExtending()
  await eventually(() => seen.length === 1, 5000, 'the lapse')
  assert.equal(seen[0].cause, 'expired')
  assert.equal(seen[0].stopped, true)
})

test('a release the store refuses (someone freed the key) is reported not-held', async (t) => {
  const locks = await client(t)
  const seen = record(t, 'release')
  const key = prefix('obs') + 'forced'
  const lock = await locks.acquire(key, { onLost: () => {} })
  await locks.forceRelease(key)
  assert.equal(await lock.release(), false)
  assert.equal(settled(seen)[0].result, 'not-held')
})

test('the leader channel says lost when leadership is taken from the leader', async (t) => {
  const locks = await client(t)
  const seen = listen(t, 'leader')
  const name = prefix('obs') + 'taken'
  const election = locks.elect(name, { ttl: 300 })
  t.after(() => election.resign())
  await eventually(() => election.isLeader, 5000, 'leadership')
  await locks.forceRelease(name)
  await eventually(() => seen.some((m) => m.leader === false), 5000, 'the loss of leadership')
  assert.equal(seen.find((m) => m.leader === false).reason, 'lost')
})

/** A client of a MariaDB URL whose port nobody listens on: every call fails fast. */
async function unreachable(t, scheme) {
  const port = await freePort()
  const locks = await connect(`${scheme}://root@127.0.0.1:${port}/test`, { lazy: true, connectTimeout: 500 })
  t.after(() => locks.close())
  return locks
}

test('the store is named by what it is, not by the spelling of its scheme', async (t) => {
  const seen = record(t, 'acquire')
  const locks = await unreachable(t, 'mariadb')
  await assert.rejects(locks.acquire(prefix('obs') + 'down', { wait: 0 }))
  assert.equal(seen[0][1].store, 'mysql')
})

test("every spelling of a store's scheme is reported as the store's registry name", async (t) => {
  const seen = record(t, 'acquire')
  const port = await freePort()
  const urls = { etcds: `etcds://127.0.0.1:${port}`, 'redis+unix': `redis+unix:///nonexistent/${prefix('s')}.sock`, unix: `unix:///nonexistent/${prefix('s')}.sock` }
  for (const url of Object.values(urls)) {
    const locks = await connect(url, { lazy: true, connectTimeout: 500 })
    t.after(() => locks.close())
    await assert.rejects(locks.acquire(prefix('obs') + 'down', { wait: 0 }))
  }
  assert.deepEqual(seen.filter(([e]) => e === 'start').map(([, c]) => c.store), ['etcd', 'redis', 'redis'])
})

test('an acquisition the store fails is reported error, on the error event too', async (t) => {
  const seen = record(t, 'acquire')
  const locks = await unreachable(t, 'mysql')
  await assert.rejects(locks.acquire(prefix('obs') + 'down', { wait: 0 }), { code: 'ERR_LOCK_BACKEND' })
  assert.equal(settled(seen)[0].result, 'error')
  assert.equal(seen.filter(([e]) => e === 'error')[0][1].error.code, 'ERR_LOCK_BACKEND')
})

test('close() publishes a lock its holder stopped extending as left, not released', async (t) => {
  const locks = await connect(`memory://observe-${prefix('m')}`)
  const seen = record(t, 'release')
  const key = prefix('obs') + 'left'
  const lock = await locks.acquire(key, { ttl: 5000, autoExtend: true })
  assert.equal(lock.stopExtending(), true)
  await locks.close()
  const [done] = settled(seen)
  assert.equal(done.key, key)
  assert.equal(done.closed, true)
  assert.equal(done.result, 'left')
})

test('withLock publishes its acquisition and its release', async (t) => {
  const locks = await client(t)
  const acquired = record(t, 'acquire')
  const released = record(t, 'release')
  const key = prefix('obs') + 'with'
  await locks.withLock(key, async () => {})
  assert.deepEqual(settled(acquired).map((c) => [c.key, c.result]), [[key, 'granted']])
  assert.deepEqual(settled(released).map((c) => [c.key, c.result]), [[key, 'released']])
})

test('a reentrant re-entry of a lock the client holds publishes no acquisition', async (t) => {
  const locks = await client(t)
  const key = prefix('obs') + 'reentrant'
  const first = await locks.acquire(key, { reentrant: true })
  const seen = record(t, 'acquire')
  const again = await locks.acquire(key, { reentrant: true })
  assert.equal(again.fencingToken, first.fencingToken)
  assert.deepEqual(seen, [])
  await again.release()
  await first.release()
})

test('adopt is published as an acquisition with adopted: true, and one that finds no lease is not', async (t) => {
  const where = `memory://observe-${prefix('m')}`
  const first = await connect(where)
  const next = await connect(where)
  t.after(() => Promise.all([first.close(), next.close()]))
  const key = prefix('obs') + 'adopt'
  const lock = await first.acquire(key, { ttl: 5000, autoExtend: true })
  lock.stopExtending()
  const seen = record(t, 'acquire')
  const adopted = await next.adopt(key, { owner: lock.owner })
  await adopted.release()
  assert.equal(await next.adopt(key, { owner: lock.owner }), null)
  assert.deepEqual(settled(seen).map((c) => [c.key, c.kind, c.owner, c.adopted, c.result]), [
    [key, 'lock', adopted.owner, true, 'granted'],
  ])
  assert.equal(settled(seen)[0].lock, adopted)
})

test("a read-write lock's adopted write hold is published with kind write", async (t) => {
  const where = `memory://observe-${prefix('m')}`
  const first = await connect(where)
  const next = await connect(where)
  t.after(() => Promise.all([first.close(), next.close()]))
  const name = prefix('obs') + 'rw'
  const hold = await first.readWriteLock(name).write({ ttl: 5000, autoExtend: true })
  hold.stopExtending()
  const seen = record(t, 'acquire')
  const adopted = await next.readWriteLock(name).adopt({ owner: hold.owner })
  assert.deepEqual(settled(seen).map((c) => [c.kind, c.adopted, c.result]), [['write', true, 'granted']])
  await adopted.release()
})
