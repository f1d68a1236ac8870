'use strict'
// A lost lock warns on the process only when nobody listens for its loss. While a store is
// stalled, acquisitions sent to it are granted only once it resumes, after their lease ran
// out: such a lock is reported lost in the very batch that grants it, before the caller's
// `await` has returned it. A caller that listens to `signal` as soon as it holds the lock must
// hear that loss there, never as a process warning; so must every caller across a restart.
// Each store is stalled (SIGSTOP) and restarted (crashed: SIGKILL, or PostgreSQL's immediate
// shutdown; then started again) under load of acquire, tryAcquire and withLock, with and
// without autoExtend, every lock's signal listened to.

const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const deadbolt = require('..')
const { prefix, sleep, eventually } = require('./helpers')
const { ThrowawayMariadb, binaries } = require('./fixtures/mariadb')
const { ThrowawayPostgres, binDir } = require('./fixtures/postgres')
const { startDynalite, dynaliteInstalled, TEST_CREDENTIALS } = require('./fixtures/dynalite')
const { stopProcess } = require('../torture/servers')

const TTL = 300
/** How long a stall lasts: well past the ttl, so grants sent into it arrive already lost. */
const STALL_MS = 3 * TTL
/** Acquisitions sent while the store is stalled. */
const BURST = 8

/** Fails under CI, skips elsewhere, when a store's server is not installed. */
function needInstalled(t, installed, what) {
  if (installed) return true
  const msg = `${what} is not installed: cannot start a throwaway server`
  if (process.env.CI) throw new Error(msg)
  t.skip(msg)
  return false
}

/** The process ids of `pid`'s children (PostgreSQL's backends), from /proc. */
function childrenOf(pid) {
  const out = []
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8')
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
      if (ppid === pid) out.push(Number(entry))
    } catch {
      // Gone meanwhile.
    }
  }
  return out
}

/** Counts what the load saw, and every ERR_LOCK_LOST process warning. */
function recorder() {
  const r = { granted: 0, heard: 0, warnings: [], late: 0 }
  r.onWarning = (w) => { if (w.code === 'ERR_LOCK_LOST') r.warnings.push(w) }
  r.listen = (lock) => {
    r.granted++
    lock.signal.addEventListener('abort', () => { r.heard++ }, { once: true })
    return lock
  }
  return r
}

/** One worker of the load: acquires, listens, holds a moment, releases, until `stop()`. */
async function worker(client, keys, i, r, stopped) {
  for (let n = 0; !stopped(); n++) {
    const key = keys[(i + n) % keys.length]
    const autoExtend = (i + n) % 2 === 0
    try {
      switch ((i + n) % 3) {
        case 0: {
          const lock = r.listen(await client.acquire(key, { ttl: TTL, wait: 1000, retryDelay: 20, autoExtend }))
          await sleep(10)
          await lock.release()
          break
        }
        case 1: {
          const lock = await client.tryAcquire(key, { ttl: TTL, autoExtend })
          if (lock !== null) {
            r.listen(lock)
            await sleep(10)
            await lock.release()
          }
          break
        }
        default:
          await client.withLock(key, { ttl: TTL, wait: 1000, retryDelay: 20, autoExtend }, async (lock) => {
            r.listen(lock)
            await sleep(10)
          })
      }
    } catch {
      // Busy, lost, or the store unreachable: what a fault does to the load.
      await sleep(20)
    }
  }
}

/**
 * Runs the load against `url` while `server` is stalled once and restarted once
 * (`server`: { pause(), resume(), restart() }, `reconnect()` after a restart if the store
 * needs it); resolves with the recorder.
 */
async function underFaults(url, server, connectOptions = {}) {
  const r = recorder()
  process.on('warning', r.onWarning)
  // Long enough that a grant held up by the stall comes back rather than times out.
  const client = await deadbolt.connect(url, { responseTimeout: 10 * STALL_MS, connectTimeout: 10 * STALL_MS, ...connectOptions })
  let stop = false
  const p = prefix('warnings')
  const keys = Array.from({ length: 4 }, (_, i) => `${p}load${i}`)
  const workers = Array.from({ length: 6 }, (_, i) => worker(client, keys, i, r, () => stop))
  try {
    await eventually(() => r.granted >= 6, 10000, 'the load to get going')

    // The stall: fresh keys asked for while the store is stopped are granted after their ttl.
    await server.pause()
    const late = []
    // A grant that arrives lost must be heard by a signal read as soon as the lock is in hand.
    const got = (lock) => {
      if (lock === null) return null
      r.listen(lock)
      if (!lock.held) {
        const entry = { heard: false }
        late.push(entry)
        lock.signal.addEventListener('abort', () => { entry.heard = true }, { once: true })
      }
      return lock
    }
    const burst = Array.from({ length: BURST }, (_, i) => i % 2 === 0
      ? client.acquire(`${p}burst${i}`, { ttl: TTL, autoExtend: i % 4 === 0 }).then(got)
      : client.tryAcquire(`${p}burst${i}`, { ttl: TTL, autoExtend: i % 4 === 1 }).then(got))
    await sleep(STALL_MS)
    server.resume()
    const settled = await Promise.allSettled(burst)
    // A grant past its lease's local deadline is given back, never returned: the call resolves
    // null (tryAcquire) or rejects with ERR_LOCK_ACQUISITION (acquire; every key of the burst
    // is its own, so neither means busy). Counted with grants that arrived lost all the same.
    const givenBack = settled.filter((s) => (s.status === 'fulfilled' && s.value === null) || s.reason?.code === 'ERR_LOCK_ACQUISITION').length
    r.late = late.length + givenBack
    // (A warning instead ends the wait: the assertions below show it.)
    await eventually(() => late.every((l) => l.heard) || r.warnings.length > 0, 10000, 'every grant that arrived lost to be heard through its signal')
    for (const s of settled) if (s.status === 'fulfilled' && s.value) await s.value.release()

    // The restart, with locks held and heartbeats running.
    const before = r.granted
    await server.restart()
    if (server.reconnect) await server.reconnect()
    await eventually(() => r.granted > before + 3, 30000, 'the load to get going after the restart')
  } finally {
    stop = true
    await Promise.all(workers)
    await client.close()
  }
  // A warning is emitted at most a setImmediate after the loss, and delivered on nextTick.
  await new Promise((resolve) => setImmediate(resolve))
  await new Promise((resolve) => setImmediate(resolve))
  process.off('warning', r.onWarning)
  return r
}

function assertNoWarning(r) {
  assert.ok(r.late >= 1, 'no grant came back late: the stall did not exercise late grants')
  assert.deepEqual(r.warnings.map((w) => w.message), [], `${r.warnings.length} lost-lock warning(s) although every signal was listened to`)
}

test('a stalled and restarted MariaDB under load prints no lost-lock warning when every signal is listened to', async (t) => {
  if (!needInstalled(t, binaries() !== null, 'MariaDB')) return
  const db = await ThrowawayMariadb.create({ port: 3407 + Math.floor(Math.random() * 400) })
  try {
    await db.start({ timeout: 60000 })
    const r = await underFaults(db.url, {
      pause: () => stopProcess(db.child.pid),
      resume: () => db.child.kill('SIGCONT'),
      restart: async () => {
        await db.stop('SIGKILL')
        await db.start({ timeout: 60000 })
      },
    })
    assertNoWarning(r)
  } finally {
    db.child?.kill('SIGCONT')
    await db.destroy()
  }
})

test('a stalled and restarted PostgreSQL under load prints no lost-lock warning when every signal is listened to', async (t) => {
  if (!needInstalled(t, binDir() !== null, 'PostgreSQL')) return
  const pg = await ThrowawayPostgres.create({ port: 5442 + Math.floor(Math.random() * 400) })
  // The postmaster and its backends (one per connection): all of them stop for a stall.
  let stopped = []
  const postmaster = () => Number(fs.readFileSync(`${pg.datadir}/postmaster.pid`, 'utf8').split('\n')[0])
  try {
    await pg.start()
    const r = await underFaults(pg.url, {
      pause: async () => {
        const pid = postmaster()
        stopped = [pid, ...childrenOf(pid)]
        for (const p of stopped) await stopProcess(p)
      },
      resume: () => {
        for (const p of stopped.reverse()) { try { process.kill(p, 'SIGCONT') } catch {} }
        stopped = []
      },
      // A crash ('immediate': no checkpoint, the next start replays the log), then a start.
      restart: async () => {
        await pg.stop('immediate')
        await pg.start()
      },
    })
    assertNoWarning(r)
  } finally {
    for (const p of stopped) { try { process.kill(p, 'SIGCONT') } catch {} }
    await pg.destroy()
  }
})

test('a stalled and restarted DynamoDB (dynalite) under load prints no lost-lock warning when every signal is listened to', async (t) => {
  if (!needInstalled(t, dynaliteInstalled(), 'dynalite')) return
  process.env.AWS_ACCESS_KEY_ID = TEST_CREDENTIALS.accessKeyId
  process.env.AWS_SECRET_ACCESS_KEY = TEST_CREDENTIALS.secretAccessKey
  let server = await startDynalite()
  const table = 'deadbolt_warnings'
  // dynalite keeps its tables in memory: after a restart the table is made again.
  const makeTable = () => deadbolt.connect(server.url(table), { createTable: true }).then((c) => c.close())
  try {
    await makeTable()
    const r = await underFaults(server.url(table), {
      pause: () => stopProcess(server.pid),
      resume: () => process.kill(server.pid, 'SIGCONT'),
      restart: async () => {
        await server.stop()
        server = await startDynalite({ port: server.port })
      },
      reconnect: makeTable,
    })
    assertNoWarning(r)
  } finally {
    try { process.kill(server.pid, 'SIGCONT') } catch {}
    await server.stop()
  }
})

test('a lost lock that nobody listens to is still reported as a process warning', async () => {
  const client = await deadbolt.connect(`memory://${prefix('warnings')}`)
  try {
    const warnings = []
    const onWarning = (w) => { if (w.code === 'ERR_LOCK_LOST') warnings.push(w) }
    process.on('warning', onWarning)
    const lock = await client.acquire('k', { ttl: 50 })
    // (A held lock does not keep the event loop alive: the polling does.)
    const [w] = await eventually(() => warnings.length > 0 && warnings, 5000, 'the warning').finally(() => process.off('warning', onWarning))
    assert.equal(w.reason, 'expired')
    assert.equal(w.key, 'k')
    assert.equal(lock.held, false)
  } finally {
    await client.close()
  }
})
