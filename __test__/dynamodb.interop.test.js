'use strict'
// deadbolt and the Java amazon-dynamodb-lock-client on one DynamoDB lock table. The Java
// client cannot be built here, so its protocol is played step by step with raw DynamoDB calls
// (fixtures/java-lock-protocol.js), in another process or in this one, against deadbolt in
// this process or another, on a throwaway dynalite.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const path = require('node:path')
const readline = require('node:readline')
const { connect } = require('..')
const { prefix } = require('./helpers')
const { sharedDynalite, TEST_CREDENTIALS } = require('./fixtures/dynalite')
const { JavaLockClient, now } = require('./fixtures/java-lock-protocol')

process.env.AWS_ACCESS_KEY_ID = TEST_CREDENTIALS.accessKeyId
process.env.AWS_SECRET_ACCESS_KEY = TEST_CREDENTIALS.secretAccessKey

const TABLE = 'deadbolt_interop'
const dynalite = sharedDynalite()
const run = prefix('interop')
let n = 0
const key = () => `${run}${++n}`
let locks = null
const children = new Set()

after(async () => {
  for (const c of children) c.kill('SIGKILL')
  if (locks) await locks.close()
  await dynalite.stop()
})

/** deadbolt's client on the interop table (created by the first need). */
async function need(t) {
  if (!(await dynalite.need(t))) return false
  locks ??= await connect(dynalite.server.url(TABLE), { createTable: true })
  return true
}

function java() {
  return new JavaLockClient({ endpoint: dynalite.server.endpoint, table: TABLE, leaseDuration: 60_000 })
}

/** Spawns a fixture; `events` yields its JSON output lines. */
function child(fixture, args) {
  const proc = spawn(process.execPath, [path.join(__dirname, 'fixtures', fixture), ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
  children.add(proc)
  const exited = new Promise((resolve) => proc.once('exit', (code, signal) => { children.delete(proc); resolve({ code, signal }) }))
  const events = readline.createInterface({ input: proc.stdout })[Symbol.asyncIterator]()
  return {
    proc,
    exited,
    async next() {
      const { value, done } = await events.next()
      if (done) throw new Error(`${fixture} ended early: ${JSON.stringify(await exited)}`)
      return JSON.parse(value)
    },
    async all() {
      const out = []
      for (;;) {
        const { value, done } = await events.next()
        if (done) break
        out.push(JSON.parse(value))
      }
      assert.deepEqual(await exited, { code: 0, signal: null })
      return out
    },
    kill() {
      proc.kill('SIGKILL')
      return exited
    },
  }
}

/** Whether `promise` has settled (checked after the pending callbacks ran). */
function tracker(promise) {
  const state = { settled: false, at: 0 }
  promise.then(() => { state.settled = true; state.at = now() }, () => { state.settled = true; state.at = now() })
  return state
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

test('deadbolt and a Java client in two other processes never hold one key at the same time', async (t) => {
  if (!(await need(t))) return
  const k = key()
  const rounds = '30'
  const javaSide = child('java-lock-protocol.js', ['contend', dynalite.server.endpoint, TABLE, k, rounds, '5'])
  const deadboltSide = child('interop-deadbolt.js', ['contend', dynalite.server.url(TABLE), k, rounds, '5'])
  const [javaHolds, deadboltHolds] = await Promise.all([javaSide.all(), deadboltSide.all()])
  assert.equal(javaHolds.length, 30)
  assert.equal(deadboltHolds.length, 30)
  for (const d of deadboltHolds) {
    for (const j of javaHolds) {
      assert.ok(d.end < j.start || j.end < d.start, `overlap: deadbolt ${JSON.stringify(d)}, java ${JSON.stringify(j)}`)
    }
  }
  // The Java client's puts drop deadbolt's counter; tokens still increase (from the clock).
  const tokens = deadboltHolds.map((d) => BigInt(d.token))
  for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i] > tokens[i - 1], `${tokens[i]} after ${tokens[i - 1]}`)
})

test('deadbolt takes over a dead Java holder only after its version stood still for a whole lease', async (t) => {
  if (!(await need(t))) return
  const k = key()
  const lease = 600
  const holder = child('java-lock-protocol.js', ['hold', dynalite.server.endpoint, TABLE, k, String(lease), '150'])
  assert.equal((await holder.next()).event, 'acquired')
  const waiting = locks.acquire(k, { wait: 20_000, retryDelay: 20 })
  const state = tracker(waiting)
  // Heartbeats for two leases: each new version restarts deadbolt's watch.
  let last
  for (let i = 0; i < 8; i++) last = await holder.next()
  assert.equal(last.event, 'heartbeat')
  assert.equal(state.settled, false, 'taken while the Java holder was heartbeating')
  await holder.kill()
  const lock = await waiting
  assert.ok(state.at - last.sent > lease, `taken ${state.at - last.sent} ms after the last heartbeat was sent`)
  const info = await locks.inspect(k)
  assert.equal(info.owner, lock.owner)
  assert.equal(info.fencingToken, lock.fencingToken)
  await lock.release()
})

test('a Java client takes over a dead deadbolt holder only after its version stood still for a whole lease', async (t) => {
  if (!(await need(t))) return
  const k = key()
  const ttl = 600
  const holder = child('interop-deadbolt.js', ['hold', dynalite.server.url(TABLE), k, String(ttl)])
  assert.equal((await holder.next()).event, 'acquired')
  const client = java()
  const waiting = client.acquire(k, { refreshPeriod: 20, additionalTimeToWait: 20_000 })
  const state = tracker(waiting)
  await sleep(2 * ttl)
  assert.equal(state.settled, false, 'taken while deadbolt was extending its lease')
  assert.ok(client.firstSeen.size > 2, 'deadbolt\'s heartbeats wrote new versions')
  await holder.kill()
  const lock = await waiting
  assert.ok(lock, 'granted')
  // The version it took over is the one it watched last, for longer than its lease.
  const lastVersion = [...client.firstSeen.entries()].at(-1)
  assert.ok(lock.lastUpdated - lastVersion[1] > ttl)
  const info = await locks.inspect(k)
  assert.equal(info.owner, client.ownerName)
  assert.equal(info.fencingToken, null, 'a Java client keeps no fencing token')
  assert.equal(await client.release(lock), true)
})

test('a release on either side frees the key for the other before any lease could run out', async (t) => {
  if (!(await need(t))) return
  const k = key()
  const held = await locks.acquire(k, { ttl: 60_000 })
  const client = java()
  const javaWaits = client.acquire(k, { refreshPeriod: 20, additionalTimeToWait: 20_000 })
  const state = tracker(javaWaits)
  await sleep(100)
  assert.equal(state.settled, false)
  await held.release()
  const javaLock = await javaWaits
  assert.ok(javaLock, 'the Java client got the released lock')
  // Java's default release deletes the item; deadbolt, waiting, gets it at once.
  const deadboltWaits = locks.acquire(k, { wait: 20_000, retryDelay: 20 })
  await sleep(100)
  assert.equal(await client.release(javaLock), true)
  const again = await deadboltWaits
  assert.ok(again.fencingToken > held.fencingToken)
  await again.release()
  // With deleteLockOnRelease false the Java client marks the item released instead.
  const keeper = new JavaLockClient({ endpoint: dynalite.server.endpoint, table: TABLE, leaseDuration: 60_000, deleteLockOnRelease: false })
  const kept = await keeper.acquire(k)
  assert.equal(await locks.tryAcquire(k), null)
  assert.equal(await keeper.release(kept), true)
  const last = await locks.tryAcquire(k)
  assert.ok(last && last.fencingToken > again.fencingToken)
  await last.release()
})
