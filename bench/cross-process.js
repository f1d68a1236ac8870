'use strict'
// Cross-process handoff on one host: how long a lock stays free between one process's release
// and the acquisition by a process that was already waiting for it.
// `node bench/cross-process.js` (see bench/README.md).
//
// Two processes take turns: one holds the lock, the other starts waiting for it (and, for
// deadbolt with wake-ups, listens for the release); after a random 0–10 ms (so a poll is at a
// random phase) the holder releases, and the roles swap. Each process times with
// process.hrtime (CLOCK_MONOTONIC, one clock for every process of the host): the handoff is
// from just before the holder's release() to the waiter's acquisition resolving. Compared:
//   deadbolt-sqlite       acquire() on sqlite://, woken by the release (Unix datagram)
//   deadbolt-sqlite-poll  tryAcquire() every 10 ms ± 50 % on the same store: a blind poll
//   proper-lockfile       lock() retrying every 10 ms (mkdir)
//   deadbolt-mysql        acquire() on the shared MariaDB with the default retryDelay, woken by
//                         its doorbell (one connection per process looking at the watched rows)
//   sql-lock              sql-lock 0.1's getLock(), which waits on the server (an InnoDB row
//                         lock in a transaction per held lock)
//   deadbolt-mysql-poll   tryAcquire() every 50 ms ± 50 % on the same store: how a waiter in
//                         another process learnt of a release before the doorbell
//   getlock               GET_LOCK/RELEASE_LOCK over mysql2, a connection per process: the
//                         server wakes the blocked waiter itself (what sql-lock's users expect)
//   deadbolt-mysql-floor  the floor of deadbolt-mysql: the waiter is told of the release by the
//                         parent (two IPC hops) and then asks once (tryAcquire); its time from
//                         the release's completion is one acquisition plus the hops, so
//                         deadbolt-mysql's minus it is what the doorbell takes to learn of it
// BENCH_XP_MODES picks some (comma-separated); BENCH_MYSQL_URL is the MariaDB (default the
// shared one). A handoff is also timed from the release's completion (`after`), which leaves
// out the release's own commit.

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { fork } = require('node:child_process')
const { percentile, median, mean, fmt, sleep } = require('./util')

const HANDOFFS = Number(process.env.BENCH_XP_HANDOFFS || 200)
const RUNS = Number(process.env.BENCH_RUNS || 3)
const RETRY = 10
// sql-lock is left out unless asked for: taking turns, its holder's DELETE after the commit
// was seen waiting behind the waiter's transaction for seconds at a time (up to MariaDB's
// innodb_lock_wait_timeout, 50 s), so a run does not finish.
const ALL_MODES = ['deadbolt-sqlite', 'deadbolt-sqlite-poll', 'proper-lockfile', 'deadbolt-mysql', 'deadbolt-mysql-poll', 'deadbolt-mysql-floor', 'getlock']
/** Modes whose waiter asks only when the parent tells it the lock was released. */
const TOLD = new Set(['deadbolt-mysql-floor'])
const MODES = process.env.BENCH_XP_MODES ? process.env.BENCH_XP_MODES.split(',') : ALL_MODES
const MYSQL_URL = process.env.BENCH_MYSQL_URL || 'mysql://root@127.0.0.1:3306/test'

/** One contender, driven by the parent: `hold`, `wait`, `release`, `exit`. */
async function child(mode, dir, key) {
  const now = () => String(process.hrtime.bigint())
  let take
  let listening = () => true
  let close = async () => {}
  if (mode === 'sql-lock') {
    const lib = require('sql-lock')
    await lib.initialize(MYSQL_URL, { locking_ttl: 10_000 })
    take = async () => {
      const release = await lib.getLock(key, 10_000)
      return { release: async () => release() }
    }
    // Its ttl timers are never cleared: the process would wait for them.
    close = async () => setImmediate(() => process.exit(0))
  } else if (mode === 'getlock') {
    const conn = await require('mysql2/promise').createConnection(MYSQL_URL)
    close = () => conn.end()
    take = async () => {
      for (;;) {
        const [[row]] = await conn.query('SELECT GET_LOCK(?, 10) AS r', [key])
        if (Number(row.r) === 1) break
      }
      return { release: () => conn.query('SELECT RELEASE_LOCK(?)', [key]) }
    }
  } else if (mode.startsWith('deadbolt-mysql')) {
    const { connect } = require('..')
    const locks = await connect(MYSQL_URL)
    close = () => locks.close()
    if (mode === 'deadbolt-mysql') {
      take = () => locks.acquire(key, { ttl: 10_000, wait: Infinity })
      listening = () => locks.stats().subscriptions > 0
    } else {
      // The floor asks right after being told (and again at once if it loses a race); the
      // blind poll every 50 ms ± 50 %, deadbolt's default retryDelay and jitter.
      const pause = mode === 'deadbolt-mysql-poll' ? () => 50 * (0.5 + Math.random()) : () => 1
      take = async () => {
        let lock
        while (!(lock = await locks.tryAcquire(key, { ttl: 10_000 }))) await sleep(pause())
        return lock
      }
    }
  } else if (mode === 'proper-lockfile') {
    const lockfile = require('proper-lockfile')
    const opts = { stale: 10_000, realpath: false, retries: { forever: true, factor: 1, minTimeout: RETRY, maxTimeout: RETRY, randomize: false } }
    take = async () => {
      const release = await lockfile.lock(path.join(dir, key), opts)
      return { release }
    }
  } else {
    const { connect } = require('..')
    const locks = await connect(`sqlite://${path.join(dir, 'locks.db')}`)
    close = () => locks.close()
    if (mode === 'deadbolt-sqlite') {
      take = () => locks.acquire(key, { ttl: 10_000, wait: Infinity, retryDelay: RETRY })
      listening = () => locks.stats().subscriptions > 0
    } else {
      take = async () => {
        let lock
        while (!(lock = await locks.tryAcquire(key, { ttl: 10_000 }))) await sleep(RETRY * (0.5 + Math.random()))
        return lock
      }
    }
  }
  let held = null
  process.on('message', async (msg) => {
    if (msg === 'hold') {
      held = await take()
      process.send({ holding: true })
    } else if (msg === 'wait' && TOLD.has(mode)) {
      process.send({ waiting: true })
    } else if (msg === 'take') {
      held = await take()
      process.send({ got: now() })
    } else if (msg === 'wait') {
      const pending = take()
      while (!listening()) await sleep(1)
      process.send({ waiting: true })
      held = await pending
      process.send({ got: now() })
    } else if (msg === 'release') {
      const at = now()
      await held.release()
      held = null
      process.send({ released: at, after: now() })
    } else if (msg === 'exit') {
      await close()
      process.disconnect()
    }
  })
  process.send({ ready: true })
}

function start(mode, dir, key) {
  const proc = fork(__filename, ['--child', mode, dir, key], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const inbox = []
  const waiting = []
  proc.on('message', (m) => {
    const w = waiting.shift()
    if (w) w(m)
    else inbox.push(m)
  })
  return {
    send: (m) => proc.send(m),
    next: () => (inbox.length ? Promise.resolve(inbox.shift()) : new Promise((resolve) => waiting.push(resolve))),
    exited: new Promise((resolve) => proc.on('exit', resolve)),
  }
}

async function run(mode) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dbbench-xp-'))
  try {
    const key = `xp-${process.pid}-${Date.now()}`
    const a = start(mode, dir, key)
    const b = start(mode, dir, key)
    await a.next()
    await b.next()
    let [holder, waiter] = [a, b]
    holder.send('hold')
    await holder.next()
    const handoffs = []
    const afters = []
    for (let i = 0; i < HANDOFFS; i++) {
      waiter.send('wait')
      await waiter.next() // waiting
      await sleep(Math.random() * RETRY)
      holder.send('release')
      const { released, after } = await holder.next()
      if (TOLD.has(mode)) waiter.send('take')
      const { got } = await waiter.next()
      handoffs.push(Number(BigInt(got) - BigInt(released)) / 1e6)
      afters.push(Number(BigInt(got) - BigInt(after)) / 1e6)
      ;[holder, waiter] = [waiter, holder]
    }
    holder.send('release')
    await holder.next()
    a.send('exit')
    b.send('exit')
    await Promise.all([a.exited, b.exited])
    handoffs.sort((x, y) => x - y)
    afters.sort((x, y) => x - y)
    return { p50: percentile(handoffs, 50), p90: percentile(handoffs, 90), mean: mean(handoffs), after50: percentile(afters, 50) }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

async function main() {
  const results = Object.fromEntries(MODES.map((m) => [m, []]))
  for (let r = 0; r < RUNS; r++) {
    for (const mode of MODES) {
      const res = await run(mode)
      results[mode].push(res)
      process.stderr.write(`run ${r + 1} ${mode}: handoff p50 ${fmt(res.p50)} ms, p90 ${fmt(res.p90)} ms, mean ${fmt(res.mean)} ms, p50 after the release ${fmt(res.after50)} ms\n`)
    }
  }
  console.log(`2 processes taking turns, ${HANDOFFS} handoffs per run; medians over ${RUNS} runs`)
  console.log('| mode | handoff p50 ms | handoff p90 ms | handoff mean ms | p50 from the release\'s completion ms |')
  console.log('| --- | --- | --- | --- | --- |')
  for (const mode of MODES) {
    const m = (f) => fmt(median(results[mode].map(f)))
    console.log(`| ${mode} | ${m((x) => x.p50)} | ${m((x) => x.p90)} | ${m((x) => x.mean)} | ${m((x) => x.after50)} |`)
  }
}

if (process.argv[2] === '--child') {
  child(...process.argv.slice(3)).catch((err) => {
    console.error(err)
    process.exit(1)
  })
} else {
  main().catch((err) => {
    console.error(err)
    process.exit(1)
  })
}
