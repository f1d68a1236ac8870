'use strict'
// Scheduled jobs: every actor schedules the same job (`locks.schedule`, an interval of
// `period` ms, so every replica names the same ticks) for a while, then stops it and schedules
// it again. Each run logs its tick, holds the job's lock while it writes to the fenced register
// with its token, and ends. Each worker process sees its own clock skewed by up to ±skew ms
// (Date.now(), which is all lib/jobs.js reads), within the `atLeastFor` margin. Checked, on
// top of the mutex's invariants (no two believed holds of the job at once, no stale write
// accepted): no tick runs twice. Figures: ticks run, ticks missed, and those missed while no
// fault was in play (or just after one: a lease of a killed or paused runner runs out first).

const PERIOD = 250
const AT_LEAST_FOR = 150
const SKEW = 75

let skewed = false
/** Skews this process's Date.now() once, by a seeded offset within ±SKEW ms. */
function skewClock(ctx) {
  if (skewed) return
  skewed = true
  const offset = ctx.rnd.int(-SKEW, SKEW)
  const real = Date.now
  Date.now = () => real() + offset
  ctx.log({ ev: 'skew', offset, real: real() })
}

async function round(ctx) {
  const { ttl } = ctx.cfg.params
  // In-process actors (memory) share one clock: no skew there.
  if (ctx.cfg.actors.length === 1) skewClock(ctx)
  const key = ctx.key('job')
  const keepAlive = ctx.rnd.chance(0.5)
  const job = await ctx.call('schedule', key, async () => ctx.client.schedule(key, { every: PERIOD }, async (run) => {
    const lock = run.lock
    const g = ctx.granted(key, lock, { tick: run.tick })
    // The real wall clock beside the monotonic stamp: the checker maps ticks onto faults.
    ctx.log({ ev: 'tick', key, tick: run.tick, g, real: ctx.realNow() })
    const onLost = () => ctx.lost(g, key)(lock.signal.reason)
    lock.signal.addEventListener('abort', onLost, { once: true })
    // Mostly shorter than a period; now and then longer (the next tick is skipped here).
    const ms = ctx.rnd.chance(0.85) ? ctx.rnd.int(10, 120) : ctx.rnd.int(PERIOD, ttl * 1.5)
    if (await ctx.hold(g, key, lock, ms, { token: lock.fencingToken })) ctx.end(g, key, 'release')
    // The lock is kept for atLeastFor after this and lapses then: no loss of the run's.
    lock.signal.removeEventListener('abort', onLost)
  }, { atMostFor: ttl, atLeastFor: AT_LEAST_FOR, keepAlive, stopTimeout: 1000, onError: () => {} }))
  if (!job) return ctx.sleep(50)
  const until = ctx.now() + ctx.rnd.int(1000, 4000)
  while (ctx.now() < until && !ctx.stopped()) await ctx.sleep(25)
  await ctx.call('stop', key, () => job.stop())
}

module.exports = {
  round,
  model: {
    kind: 'exclusive',
    register: true,
    ticks: { period: PERIOD, atLeastFor: AT_LEAST_FOR, skew: SKEW },
    // The job's run record outlives the run by design (one small key per job, lapsing after 7 days).
    keeps: (key) => key.includes('__deadbolt.jobs/'),
  },
}
