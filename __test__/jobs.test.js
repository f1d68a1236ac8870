'use strict'
// Scheduled jobs (lib/jobs.js, docs/jobs.md): schedule, runOnce, assertLocked, the run record
// and stopping. Two clients of one memory store stand for two replicas (what happens does not
// depend on the store), and one test runs on Redis.

const test = require('node:test')
const assert = require('node:assert/strict')
const dc = require('node:diagnostics_channel')
const { connect, assertLocked } = require('..')
const { prefix, eventually, needRedis, REDIS_URL } = require('./helpers')

async function clients(t, n = 2) {
  const store = `memory://jobs-${prefix('m')}`
  const out = []
  for (let i = 0; i < n; i++) {
    const locks = await connect(store, { name: `replica-${i}` })
    t.after(() => locks.close())
    out.push(locks)
  }
  return out
}

/** A promise and its resolve function. */
function deferred() {
  let resolve
  const promise = new Promise((r) => { resolve = r })
  return { promise, resolve }
}

/** Resolves with the next event `signal` fires (at once if it has). */
function aborted(signal) {
  return signal.aborted ? Promise.resolve(signal.reason) : new Promise((r) => signal.addEventListener('abort', () => r(signal.reason), { once: true }))
}

test('two clients scheduling the same every-second cron job run each tick once', async (t) => {
  const [a, b] = await clients(t)
  const name = prefix('tick')
  const runs = []
  const three = deferred()
  const fn = (who) => (ctx) => {
    runs.push({ who, tick: ctx.tick, token: ctx.fencingToken })
    if (new Set(runs.map((r) => r.tick)).size >= 3) three.resolve()
  }
  const jobs = [a.schedule(name, '* * * * * *', fn('a')), b.schedule(name, '* * * * * *', fn('b'))]
  await three.promise
  await Promise.all(jobs.map((j) => j.stop()))
  const ticks = runs.map((r) => r.tick)
  assert.equal(new Set(ticks).size, ticks.length, `a tick ran twice: ${JSON.stringify(ticks)}`)
  for (const tick of ticks) assert.equal(tick % 1000, 0)
  const tokens = runs.map((r) => r.token)
  assert.deepEqual(tokens, [...tokens].sort((x, y) => (x < y ? -1 : 1)))
})

test('an interval job names its ticks by the multiples of its period, on every replica alike', async (t) => {
  const [a] = await clients(t, 1)
  const seen = deferred()
  const job = a.schedule(prefix('every'), { every: 200 }, (ctx) => seen.resolve(ctx.tick))
  const tick = await seen.promise
  await job.stop()
  assert.equal(tick % 200, 0)
})

test('a tick whose lock is held elsewhere is skipped, not queued', async (t) => {
  const [a, b] = await clients(t)
  const name = prefix('skip')
  const inside = deferred()
  const leave = deferred()
  const first = a.runOnce(name, async () => {
    inside.resolve()
    await leave.promise
    return 'a'
  })
  await inside.promise
  let called = false
  const second = await b.runOnce(name, () => { called = true })
  assert.equal(second.ran, false)
  assert.equal(second.run.outcome, 'skipped')
  assert.equal(second.run.reason, 'busy')
  assert.equal(called, false)
  leave.resolve()
  assert.deepEqual((await first).result, 'a')
  assert.equal(called, false)
})

test('runOnce runs fn with the lock and resolves with its result', async (t) => {
  const [a] = await clients(t, 1)
  const name = prefix('once')
  const out = await a.runOnce(name, async (ctx) => {
    assert.equal(ctx.name, name)
    assert.equal(ctx.tick, null)
    assert.equal(typeof ctx.fencingToken, 'bigint')
    assert.equal(ctx.signal.aborted, false)
    assert.equal((await a.inspect(name)).fencingToken, ctx.fencingToken)
    return 42
  })
  assert.equal(out.ran, true)
  assert.equal(out.result, 42)
  assert.equal(out.run.outcome, 'ran')
  assert.equal(await a.inspect(name), null)
})

test('atLeastFor keeps the lock after a fast run', async (t) => {
  const [a, b] = await clients(t)
  const name = prefix('least')
  await a.runOnce(name, () => {}, { atLeastFor: 60_000, atMostFor: 120_000 })
  const info = await b.inspect(name)
  assert.ok(info !== null)
  assert.ok(info.remainingMs > 0 && info.remainingMs <= 60_000, `remaining ${info.remainingMs}`)
  assert.equal((await b.runOnce(name, () => {})).run.reason, 'busy')
})

test('a tick the record shows as run is skipped when its lock is free again', async (t) => {
  const [a, b] = await clients(t)
  const name = prefix('done')
  const tick = Date.UTC(2026, 0, 1)
  assert.equal((await a.runOnce(name, () => {}, { tick })).ran, true)
  // A replica whose clock is behind fires the same tick after the lock was released.
  const late = await b.runOnce(name, () => assert.fail('ran twice'), { tick: new Date(tick) })
  assert.equal(late.ran, false)
  assert.equal(late.run.reason, 'done')
  assert.equal((await b.runOnce(name, () => {}, { tick: tick + 1000 })).ran, true)
})

test('losing the lock aborts the signal and runOnce rejects with the loss', async (t) => {
  const [a, b] = await clients(t)
  const name = prefix('lost')
  const runs = []
  const seen = (msg) => { if (msg.name === name) runs.push(msg) }
  dc.subscribe('deadbolt:job', seen)
  t.after(() => dc.unsubscribe('deadbolt:job', seen))
  const err = await a.runOnce(name, async (ctx) => {
    await b.forceRelease(name)
    // Polled: the heartbeat that finds the lock gone holds no handle on the event loop.
    await eventually(() => ctx.signal.aborted, 5000, 'the signal')
    assert.equal(ctx.signal.reason.code, 'ERR_LOCK_LOST')
    assert.throws(() => ctx.assertLocked(), { code: 'ERR_LOCK_NOT_HELD', name: 'LockNotHeldError' })
  }, { keepAlive: true, atMostFor: 300 }).then(() => null, (e) => e)
  assert.equal(err?.code, 'ERR_LOCK_LOST')
  assert.equal(runs.at(-1).outcome, 'lost')
})

test('assertLocked passes inside a job and throws outside one', async (t) => {
  const [a] = await clients(t, 1)
  assert.throws(() => assertLocked(), { code: 'ERR_LOCK_NOT_HELD' })
  await a.runOnce(prefix('assert'), async (ctx) => {
    await Promise.resolve()
    assertLocked()
    ctx.assertLocked()
  })
})

test('jobs() lists the last run of each job with who ran it', async (t) => {
  const [a, b] = await clients(t)
  const name = prefix('record')
  await a.runOnce(name, () => {})
  const runs = (await b.jobs()).filter((r) => r.name === name)
  assert.equal(runs.length, 1)
  const [run] = runs
  assert.equal(run.outcome, 'ran')
  assert.equal(run.holder.name, 'replica-0')
  assert.equal(run.holder.pid, process.pid)
  assert.ok(run.endedAt >= run.startedAt)
  assert.equal(run.durationMs, run.endedAt - run.startedAt)
  assert.equal(typeof run.fencingToken, 'bigint')
  assert.equal(JSON.parse(JSON.stringify(run)).fencingToken, String(run.fencingToken))
  await b.runOnce(name, () => { throw Object.assign(new Error('secret detail'), { code: 'E_X' }) }).catch(() => {})
  const [failed] = (await a.jobs()).filter((r) => r.name === name)
  assert.equal(failed.outcome, 'failed')
  assert.equal(failed.holder.name, 'replica-1')
  assert.deepEqual(failed.error, { name: 'Error', code: 'E_X' })
})

test('an error in fn goes to onError and the next tick runs as usual', async (t) => {
  const [a] = await clients(t, 1)
  const errors = []
  const second = deferred()
  let n = 0
  const job = a.schedule(prefix('error'), { every: 100 }, () => {
    if (++n === 1) throw Object.assign(new Error('boom'), { code: 'E_BOOM' })
    second.resolve()
  }, { onError: (err, run) => errors.push([err.code, run.outcome]) })
  await second.promise
  await job.stop()
  assert.deepEqual(errors, [['E_BOOM', 'failed']])
})

test('a tick that comes while the previous run still runs here is skipped', async (t) => {
  const [a] = await clients(t, 1)
  const leave = deferred()
  let calls = 0
  const job = a.schedule(prefix('slow'), { every: 50 }, () => { calls++; return leave.promise }, { atMostFor: 60_000 })
  await eventually(() => job.lastRun?.reason === 'running', 5000, 'a skipped tick')
  assert.equal(job.running, true)
  assert.equal(calls, 1)
  leave.resolve()
  await job.stop()
})

test('stop() lets a running fn finish and stops scheduling', async (t) => {
  const [a] = await clients(t, 1)
  const inside = deferred()
  const leave = deferred()
  let signal
  const job = a.schedule(prefix('stop'), { every: 100 }, async (ctx) => {
    signal = ctx.signal
    inside.resolve()
    await leave.promise
  })
  assert.ok(job.nextRun instanceof Date)
  await inside.promise
  const stopping = job.stop()
  assert.equal(job.nextRun, null)
  leave.resolve()
  await stopping
  assert.equal(signal.aborted, false)
  assert.equal(job.running, false)
  assert.equal(job.lastRun.outcome, 'ran')
})

test('stop() aborts the signal of a fn that outlasts stopTimeout', async (t) => {
  const [a] = await clients(t, 1)
  const inside = deferred()
  let reason
  const job = a.schedule(prefix('abort'), { every: 100 }, async (ctx) => {
    inside.resolve()
    reason = await aborted(ctx.signal)
  }, { stopTimeout: 20, onError: () => {} })
  await inside.promise
  await job.stop()
  assert.equal(reason.code, 'ERR_LOCK_ABORTED')
  assert.equal(job.running, false)
})

test('close() stops the jobs, lets the running fn finish and releases its lock', async (t) => {
  const [a, b] = await clients(t)
  const name = prefix('close')
  const inside = deferred()
  const leave = deferred()
  let finished = false
  const job = a.schedule(name, { every: 100 }, async () => {
    inside.resolve()
    await leave.promise
    finished = true
  })
  await inside.promise
  const closing = a.close()
  leave.resolve()
  await closing
  assert.equal(finished, true)
  assert.equal(job.nextRun, null)
  assert.equal(await b.inspect(name), null)
  assert.equal((await b.jobs()).find((r) => r.name === name).outcome, 'ran')
})

test('close() keeps the lock of a run until atLeastFor has passed', async (t) => {
  const [a, b] = await clients(t)
  const name = prefix('closeleast')
  const ran = deferred()
  a.schedule(name, { every: 100 }, () => ran.resolve(), { atLeastFor: 60_000 })
  await ran.promise
  await eventually(async () => (await b.jobs()).some((r) => r.name === name && r.outcome === 'ran'), 5000, 'the record')
  await a.close()
  assert.ok((await b.inspect(name)) !== null)
})

test('the deadbolt:job channel publishes every settled tick', async (t) => {
  const [a, b] = await clients(t)
  const name = prefix('channel')
  const seen = []
  const fn = (msg) => { if (msg.name === name) seen.push(msg) }
  dc.subscribe('deadbolt:job', fn)
  t.after(() => dc.unsubscribe('deadbolt:job', fn))
  const leave = deferred()
  const inside = deferred()
  const first = a.runOnce(name, () => { inside.resolve(); return leave.promise })
  await inside.promise
  await b.runOnce(name, () => {})
  leave.resolve()
  await first
  assert.deepEqual(seen.map((m) => [m.outcome, m.reason, m.store]), [['skipped', 'busy', 'memory'], ['ran', null, 'memory']])
  assert.equal(typeof seen[1].durationMs, 'number')
})

test('schedule and runOnce refuse bad arguments with coded errors', async (t) => {
  const [a] = await clients(t, 1)
  const fn = () => {}
  const cases = [
    [() => a.schedule(1, '* * * * *', fn), 'ERR_INVALID_ARG_TYPE', /"name"/],
    [() => a.schedule('j', 'not cron', fn), 'ERR_INVALID_ARG_VALUE', /'when'/],
    [() => a.schedule('j', true, fn), 'ERR_INVALID_ARG_TYPE', /"when"/],
    [() => a.schedule('j', 0, fn), 'ERR_OUT_OF_RANGE', /"when"/],
    [() => a.schedule('j', { every: 1.5 }, fn), 'ERR_OUT_OF_RANGE', /"when.every"/],
    [() => a.schedule('j', { evry: 1000 }, fn), 'ERR_INVALID_ARG_VALUE', /Did you mean "every"/],
    [() => a.schedule('j', '* * * * *', 'fn'), 'ERR_INVALID_ARG_TYPE', /"fn"/],
    [() => a.schedule('j', '* * * * *', fn, { atMostFor: 100, atLeastFor: 200 }), 'ERR_OUT_OF_RANGE', /"options.atLeastFor"/],
    [() => a.schedule('j', '* * * * *', fn, { atMostFor: -1 }), 'ERR_OUT_OF_RANGE', /"options.atMostFor"/],
    [() => a.schedule('j', '* * * * *', fn, { keepAlive: 'yes' }), 'ERR_INVALID_ARG_TYPE', /"options.keepAlive"/],
    [() => a.schedule('j', '* * * * *', fn, { onError: 1 }), 'ERR_INVALID_ARG_TYPE', /"options.onError"/],
    [() => a.schedule('j', '* * * * *', fn, { timezone: 'Mars/Olympus' }), 'ERR_INVALID_ARG_VALUE', /'options.timezone'/],
    [() => a.schedule('j', 1000, fn, { timezone: 'Europe/Paris' }), 'ERR_INVALID_ARG_VALUE', /'options.timezone'/],
    [() => a.schedule('j', '* * * * *', fn, { atMostfor: 1 }), 'ERR_INVALID_ARG_VALUE', /Did you mean "atMostFor"/],
    [() => a.schedule('j', '* * * * *', fn, []), 'ERR_INVALID_ARG_TYPE', /"options"/],
  ]
  for (const [call, code, message] of cases) assert.throws(call, { code, message })
  await assert.rejects(a.runOnce('j', fn, { tick: 'now' }), { code: 'ERR_INVALID_ARG_TYPE', message: /"options.tick"/ })
  await assert.rejects(a.runOnce('j', fn, { timezone: 'UTC' }), { code: 'ERR_INVALID_ARG_VALUE' })
  await assert.rejects(a.runOnce('j', null), { code: 'ERR_INVALID_ARG_TYPE', message: /"fn"/ })
  await assert.rejects(a.jobs({ limit: 0 }), { code: 'ERR_OUT_OF_RANGE' })
  await assert.rejects(a.jobs({ prefix: 1 }), { code: 'ERR_INVALID_ARG_TYPE', message: /"options.prefix"/ })
})

test('a closed client refuses to schedule or run a job', async (t) => {
  const [a] = await clients(t, 1)
  await a.close()
  assert.throws(() => a.schedule('j', 1000, () => {}), { code: 'ERR_LOCK_CLOSED' })
  await assert.rejects(a.runOnce('j', () => {}), { code: 'ERR_LOCK_CLOSED' })
})

test('a cron job honours its time zone', async (t) => {
  const [a] = await clients(t, 1)
  // 02:30 every day: on the day Paris springs forward, 02:30 does not exist there.
  const job = a.schedule(prefix('tz'), '30 2 * * *', () => {}, { timezone: 'Europe/Paris' })
  t.after(() => job.stop())
  const next = job.nextRun
  const hour = Number(new Intl.DateTimeFormat('en-GB', { timeZone: 'Europe/Paris', hour: '2-digit', hourCycle: 'h23' }).format(next))
  assert.ok(hour === 2 || hour === 3, `ran at ${next.toISOString()}`)
})

test('two Redis clients scheduling one every-second job run each tick once', async (t) => {
  await needRedis(t)
  const name = prefix('redis-job')
  const runs = []
  const two = deferred()
  const jobs = []
  for (let i = 0; i < 2; i++) {
    const locks = await connect(REDIS_URL)
    t.after(() => locks.close())
    jobs.push(locks.schedule(name, '* * * * * *', (ctx) => {
      runs.push(ctx.tick)
      if (new Set(runs).size >= 2) two.resolve()
    }, { atLeastFor: 500 }))
  }
  await two.promise
  await Promise.all(jobs.map((j) => j.stop()))
  assert.equal(new Set(runs).size, runs.length, `a tick ran twice: ${runs}`)
  const locks = await connect(REDIS_URL)
  t.after(() => locks.close())
  const [run] = (await locks.jobs()).filter((r) => r.name === name)
  assert.ok(run.outcome === 'ran')
  await locks.forceRelease(`__deadbolt.jobs/${name}`)
})
