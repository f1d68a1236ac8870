'use strict'
// What a scheduled job costs per tick, against a bare timer on the same ticks:
//  - lag: from a tick's time to fn's start, for `locks.schedule(name, { every: 50 }, fn)`
//    and for a bare setTimeout chain aligned on the same multiples of 50 ms (the least any
//    scheduler can do); the difference is what the lock and the record cost a tick;
//  - runOnce: one `runOnce(name, noop, { tick })` call, sequentially: the lock, the record
//    read, two record writes and the release.
// Medians over BENCH_RUNS (5) interleaved rounds, on the in-process store and on Redis
// (BENCH_REDIS_URL, default the shared 127.0.0.1:6379; skipped when it does not answer).
//   node bench/jobs.js      # writes bench/RESULTS-jobs.md

const fs = require('node:fs')
const path = require('node:path')
const { connect } = require('..')
const { median, fmt } = require('./util')

const RUNS = Number(process.env.BENCH_RUNS || 5)
const TICKS = Number(process.env.BENCH_TICKS || 30)
const CALLS = Number(process.env.BENCH_CALLS || 200)
const PERIOD = 50
const REDIS = process.env.BENCH_REDIS_URL || 'redis://127.0.0.1:6379'

/** Lags (ms) of TICKS ticks of a bare setTimeout chain on the multiples of PERIOD. */
function bareLags() {
  return new Promise((resolve) => {
    const lags = []
    const arm = () => {
      const next = (Math.floor(Date.now() / PERIOD) + 1) * PERIOD
      setTimeout(() => {
        lags.push(Date.now() - next)
        if (lags.length === TICKS) resolve(lags)
        else arm()
      }, next - Date.now())
    }
    arm()
  })
}

/** Lags (ms) of TICKS ticks of a scheduled job. */
async function jobLags(locks, name) {
  const lags = []
  let job
  await new Promise((resolve) => {
    job = locks.schedule(name, { every: PERIOD }, (ctx) => {
      lags.push(Date.now() - ctx.tick)
      if (lags.length === TICKS) resolve()
    })
  })
  await job.stop()
  return lags
}

/** ms per runOnce call, over CALLS sequential calls. */
async function runOnceMs(locks, name) {
  const t0 = process.hrtime.bigint()
  for (let i = 1; i <= CALLS; i++) await locks.runOnce(name, () => {}, { tick: i })
  return Number(process.hrtime.bigint() - t0) / 1e6 / CALLS
}

async function main() {
  const stores = [['memory', 'memory://bench-jobs']]
  try {
    const r = await connect(REDIS, { connectTimeout: 1000 })
    await r.close()
    stores.push(['redis', REDIS])
  } catch {
    console.error(`Redis at ${REDIS} does not answer: memory only`)
  }
  const rows = new Map()
  for (let run = 0; run < RUNS; run++) {
    for (const [store, url] of run % 2 ? [...stores].reverse() : stores) {
      const locks = await connect(url)
      const name = `dbbench:jobs:${process.pid}:${run}`
      const bare = median(await bareLags())
      const job = median(await jobLags(locks, `${name}:lag`))
      const once = await runOnceMs(locks, `${name}:once`)
      for (const n of [`${name}:lag`, `${name}:once`]) await locks.forceRelease(`__deadbolt.jobs/${n}`)
      await locks.close()
      const row = rows.get(store) ?? { bare: [], job: [], once: [] }
      row.bare.push(bare)
      row.job.push(job)
      row.once.push(once)
      rows.set(store, row)
    }
  }
  const lines = [
    '# Scheduled jobs: cost per tick (`node bench/jobs.js`)',
    '',
    `${new Date().toISOString().slice(0, 10)}, debug build, ${RUNS} interleaved rounds (medians; min–max), ${TICKS} ticks of ${PERIOD} ms a round, ${CALLS} runOnce calls a round.`,
    '',
    '| store | bare timer lag, ms | job lag, ms | job − bare, ms | runOnce, ms a call |',
    '|---|---|---|---|---|',
  ]
  for (const [store, r] of rows) {
    const span = (xs) => `${fmt(median(xs))} (${fmt(Math.min(...xs))}–${fmt(Math.max(...xs))})`
    lines.push(`| ${store} | ${span(r.bare)} | ${span(r.job)} | ${fmt(median(r.job) - median(r.bare))} | ${span(r.once)} |`)
  }
  const text = lines.join('\n') + '\n'
  console.log(text)
  fs.writeFileSync(path.join(__dirname, 'RESULTS-jobs.md'), text)
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
