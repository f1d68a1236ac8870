'use strict'
// Scheduled jobs that run on one replica per tick: `schedule(name, when, fn)` and
// `runOnce(name, fn)` (docs/jobs.md). A job is a lock plus a run record:
//  - the lock is the job's `name` itself, taken with tryAcquire (a tick whose lock is held
//    elsewhere is skipped, never queued) for `atMostFor` ms (kept alive while fn runs with
//    `keepAlive`), and kept after a fast run until `atLeastFor` ms after its start;
//  - the record is a small lock `__deadbolt.jobs/<name>` whose payload is the last run as JSON,
//    written by the job lock's holder only (so writes never race while the lock is held): once
//    before fn runs (a claim of the tick) and once after. A runner reads it under the job lock
//    and skips a tick the record shows as already claimed, so a replica whose clock is behind
//    does not run a tick again once the lock is free. The stores have no "put a value"
//    operation; a payload, `forceRelease`, `tryAcquire` and `stopExtending` make one.
// Times are read from Date.now() only (a process's own clock: the fault harness skews it).

const timers = require('timers')
const { AsyncLocalStorage } = require('async_hooks')
const v = require('./validate')
const { LockNotHeldError, LockAbortedError, LockClosedError } = require('./errors')
const { newAbortController } = require('./abort')
const { holderOf } = require('./identity')
const { withToJSON, tokenJSON } = require('./json')
const observe = require('./observe')

/** Where a job's record lives: this prefix and the job's name. */
const RECORD_PREFIX = '__deadbolt.jobs/'
/** How long a record outlives its last write, in ms (7 days). */
const RECORD_TTL = 7 * 24 * 3600 * 1000
/** Defaults of the job options. */
const JOB_DEFAULTS = Object.freeze({ atMostFor: 60_000, atLeastFor: 0, keepAlive: false, stopTimeout: 10_000 })
/** The options `schedule` takes. */
const SCHEDULE_OPTIONS = new Set(['atMostFor', 'atLeastFor', 'keepAlive', 'onError', 'timezone', 'stopTimeout'])
/** The options `runOnce` takes. */
const RUN_ONCE_OPTIONS = new Set(['atMostFor', 'atLeastFor', 'keepAlive', 'tick'])
/** The options `jobs` takes. */
const JOBS_OPTIONS = new Set(['prefix', 'limit'])
const noop = () => {}

/** The job context of the fn running in this async context (for `assertLocked()`). */
const current = new AsyncLocalStorage()

/** Checks a job name: a lock key whose record key also fits. */
function checkJobName(name) {
  v.checkKey(name, 'name')
  const bytes = Buffer.byteLength(name)
  if (bytes + RECORD_PREFIX.length > v.MAX_KEY_BYTES) {
    throw v.rangeError('name.length', `at most ${v.MAX_KEY_BYTES - RECORD_PREFIX.length} bytes`, bytes)
  }
  return name
}

/** Checks the options shared by schedule and runOnce; returns them resolved. */
function checkRunOptions(options, known) {
  const o = { ...JOB_DEFAULTS, onError: undefined, timezone: undefined, tick: null }
  if (options === undefined || options === null) return o
  v.checkObject(options, 'options')
  v.checkKnownKeys(options, known, 'options')
  const get = (k) => v.own(options, k)
  if (get('atMostFor') !== undefined) o.atMostFor = v.checkInt(get('atMostFor'), 'options.atMostFor', 2)
  if (get('atLeastFor') !== undefined) o.atLeastFor = v.checkInt(get('atLeastFor'), 'options.atLeastFor', 0)
  if (o.atLeastFor > o.atMostFor) throw v.rangeError('options.atLeastFor', `<= options.atMostFor (${o.atMostFor})`, o.atLeastFor)
  if (get('keepAlive') !== undefined) o.keepAlive = v.checkBoolean(get('keepAlive'), 'options.keepAlive')
  if (get('stopTimeout') !== undefined) o.stopTimeout = v.checkInt(get('stopTimeout'), 'options.stopTimeout', 0)
  if (get('onError') !== undefined) o.onError = v.checkFunction(get('onError'), 'options.onError')
  if (get('timezone') !== undefined) {
    const tz = get('timezone')
    if (typeof tz !== 'string') throw v.typeError('options.timezone', 'of type string', tz)
    o.timezone = tz
  }
  const tick = get('tick')
  if (tick !== undefined) {
    const ms = tick instanceof Date ? tick.getTime() : tick
    if (typeof ms !== 'number') throw v.typeError('options.tick', 'a Date or a number of ms since the epoch', tick)
    if (!Number.isSafeInteger(ms)) throw v.rangeError('options.tick', 'a whole number of ms since the epoch', ms)
    o.tick = ms
  }
  return o
}

/**
 * Turns `when` into `nextAfter(ms)`: the first tick strictly after `ms`, or null when there is
 * none (a cron expression whose last date passed). A string is a cron expression (croner:
 * 5 to 7 fields, seconds, `timezone`); a number or `{ every }` an interval in ms, its ticks
 * at the multiples of `every` since the epoch, so that every replica names the same ticks.
 */
function parseWhen(when, timezone) {
  let every
  if (typeof when === 'string') {
    const { Cron } = require('croner')
    let cron
    try {
      cron = new Cron(when, { paused: true, timezone })
      // A bad time zone shows on first use.
      cron.nextRun(new Date(0))
    } catch (err) {
      const name = timezone !== undefined && /time ?zone|invalid time/i.test(String(err?.message)) ? 'options.timezone' : 'when'
      throw v.valueError(name, `is not a valid ${name === 'when' ? 'cron expression' : 'time zone'}: ${err?.message}`, name === 'when' ? when : timezone)
    }
    return (ms) => {
      const next = cron.nextRun(new Date(ms))
      return next === null ? null : next.getTime()
    }
  }
  if (typeof when === 'number') {
    every = v.checkInt(when, 'when')
  } else if (v.isPlainObject(when)) {
    v.checkKnownKeys(when, EVERY_KEYS, 'when')
    every = v.checkInt(v.own(when, 'every'), 'when.every')
  } else {
    throw v.typeError('when', 'a cron expression (string), a number of ms or { every: ms }', when)
  }
  if (timezone !== undefined) throw v.valueError('options.timezone', 'applies to cron expressions only', timezone)
  return (ms) => (Math.floor(ms / every) + 1) * every
}
const EVERY_KEYS = new Set(['every'])

/** The key of `name`'s run record. */
function recordKey(name) {
  return RECORD_PREFIX + name
}

/** Reads `name`'s last run record, or null (none, or not one of ours). */
async function readRecord(client, name) {
  const info = await client.inspect(recordKey(name))
  return info === null ? null : parseRecord(info.data)
}

/** A record's JSON payload as a run (see toRun), or null. */
function parseRecord(data) {
  if (typeof data !== 'string') return null
  try {
    const r = JSON.parse(data)
    return r !== null && typeof r === 'object' && typeof r.name === 'string' ? toRun(r) : null
  } catch {
    return null
  }
}

/** A stored record as the API shows it: the token as a bigint again (its JSON: a string). */
function toRun(r) {
  return withToJSON({
    name: r.name,
    tick: r.tick ?? null,
    outcome: r.outcome,
    startedAt: r.startedAt ?? null,
    endedAt: r.endedAt ?? null,
    durationMs: r.durationMs ?? null,
    holder: r.holder ?? null,
    owner: r.owner ?? null,
    fencingToken: r.fencingToken == null ? null : BigInt(r.fencingToken),
    nextDue: r.nextDue ?? null,
    error: r.error ?? null,
  })
}

/**
 * Writes `run` as `name`'s record: drops this client's previous record lock (which frees the
 * record if it is still this client's), frees whoever else's is there, and takes the record
 * again with the run as its payload, left to lapse after RECORD_TTL (closing the client or
 * ending the process leaves it). Only the job lock's holder writes, so writers do not race
 * while it is held.
 */
async function writeRecord(client, name, run) {
  const key = recordKey(name)
  const records = client._jobRecords
  const prev = records.get(name)
  let freed = false
  if (prev !== undefined) {
    records.delete(name)
    freed = await prev.release()
  }
  if (!freed) await client.forceRelease(key)
  const data = JSON.stringify({ ...run, fencingToken: tokenJSON(run.fencingToken) })
  const lock = await client.tryAcquire(key, { ttl: RECORD_TTL, data, fencing: false, onLost: noop })
  if (lock !== null) {
    lock.stopExtending()
    records.set(name, lock)
  }
}

/** An error's name and code, never its message (it may carry anything): what records keep. */
function errorSummary(err) {
  if (err === null || err === undefined) return null
  return { name: typeof err.name === 'string' ? err.name : 'Error', code: typeof err.code === 'string' ? err.code : null }
}

/** What fn receives: the lock's signal, token and the assertion. */
class JobContext {
  constructor(name, tick, lock, signal) {
    this.name = name
    /** The tick this run is for (ms since the epoch), or null for a runOnce call without one. */
    this.tick = tick
    this.lock = lock
    this.signal = signal
    this.fencingToken = lock.fencingToken
  }

  /** Throws a LockNotHeldError (`cause`: the loss) unless the job's lock is still held. */
  assertLocked() {
    if (this.lock.held) return
    const lost = this.lock._checkLost()
    throw new LockNotHeldError(`The lock of job "${this.name}" is no longer held`, { cause: lost ?? undefined })
  }
}

/**
 * Throws a LockNotHeldError unless called (at any depth, across awaits) from the fn of a job
 * or runOnce call whose lock is still held.
 */
function assertLocked() {
  const ctx = current.getStore()
  if (ctx === undefined) throw new LockNotHeldError('assertLocked() was called outside a job')
  ctx.assertLocked()
}

/**
 * Settles the job lock after a run: kept until `atLeastFor` ms after `startedAt` (its heartbeat
 * stopped and its lease cut to what is left, so closing the client leaves it to lapse), else
 * released.
 */
async function settleLock(lock, startedAt, atLeastFor) {
  const left = Math.ceil(startedAt + atLeastFor - Date.now())
  if (left >= 1 && lock.held) {
    lock.stopExtending()
    await lock.extend(left).catch(noop)
  } else {
    await lock.release().catch(noop)
  }
}

/**
 * One run of `name` for `tick` (ms, or null): takes the lock without waiting, checks and claims
 * the tick in the record, runs fn, records the outcome and settles the lock. Resolves with
 * `{ run, result, error }`: `run` the record (outcome `ran`, `failed`, `lost`, `skipped` with a
 * `reason`, or `error` when the store failed), `error` what fn threw or the store's error.
 * `job`: the scheduling Job, for its stop signal and next due time (undefined for runOnce).
 */
async function runTick(client, name, fn, o, tick, job) {
  const startedAt = Date.now()
  const run = {
    name,
    tick,
    outcome: 'running',
    reason: null,
    startedAt,
    endedAt: null,
    durationMs: null,
    holder: holderOf(client._ownerPrefix + '0'),
    owner: null,
    fencingToken: null,
    nextDue: job === undefined ? null : job._next,
    error: null,
  }
  const settle = (outcome, reason, error, result) => {
    run.outcome = outcome
    run.reason = reason
    run.endedAt = Date.now()
    run.durationMs = run.endedAt - startedAt
    run.error = errorSummary(error)
    const shown = toRun(run)
    shown.reason = reason
    observe.jobRun(client, shown, error)
    return { run: shown, result, error }
  }
  let lock
  try {
    lock = await client.tryAcquire(name, {
      ttl: o.atMostFor,
      autoExtend: o.keepAlive,
      data: JSON.stringify({ job: name, tick, startedAt }),
      onLost: noop,
    })
  } catch (err) {
    return settle('error', 'acquire', err)
  }
  if (lock === null) return settle('skipped', 'busy', null)
  run.owner = lock.owner
  run.fencingToken = lock.fencingToken
  try {
    if (tick !== null) {
      const last = await readRecord(client, name)
      if (last !== null && last.tick !== null && last.tick >= tick) {
        await lock.release()
        return settle('skipped', 'done', null)
      }
    }
    // The claim: a replica that takes the lock later (its clock behind) sees this tick taken.
    await writeRecord(client, name, run)
  } catch (err) {
    await lock.release().catch(noop)
    return settle('error', 'record', err)
  }
  // The lease may have run out meanwhile (a slow store): fn never starts without the lock.
  if (!lock.held) {
    const lost = lock._checkLost()
    await lock.release().catch(noop)
    return settle('lost', 'claim', lost)
  }
  const ac = newAbortController()
  const onLockLost = () => ac.abort(lock._lostError ?? lock.signal.reason)
  lock.signal.addEventListener('abort', onLockLost, { once: true })
  if (lock.signal.aborted) onLockLost()
  const stopping = job?._stopSignal
  const onStop = () => ac.abort(stopping.reason)
  if (stopping !== undefined) stopping.addEventListener('abort', onStop, { once: true })
  const ctx = new JobContext(name, tick, lock, ac.signal)
  let result
  let error = null
  let failed = false
  try {
    result = await current.run(ctx, () => fn(ctx))
  } catch (err) {
    failed = true
    error = err
  }
  lock.signal.removeEventListener('abort', onLockLost)
  if (stopping !== undefined) stopping.removeEventListener('abort', onStop)
  const lost = lock._checkLost()
  let outcome = 'ran'
  if (lost !== null) {
    outcome = 'lost'
    if (!failed) error = lost
  } else if (failed) {
    outcome = 'failed'
  }
  const done = settle(outcome, null, error, result)
  // The record first, then the lock: whoever takes the lock next reads this run.
  if (lost === null) {
    await writeRecord(client, name, done.run).catch(noop)
    await settleLock(lock, startedAt, o.atLeastFor)
  } else {
    await writeRecord(client, name, done.run).catch(noop)
    await lock.release().catch(noop)
  }
  return done
}

/** A scheduled job: runs `fn` at each tick of `when` on one of the processes that schedule it. */
class Job {
  /** @internal */
  constructor(client, name, nextAfter, fn, o) {
    this.name = name
    this._client = client
    this._nextAfter = nextAfter
    this._fn = fn
    this._o = o
    this._next = null
    this._timer = null
    this._current = null
    this._lastRun = null
    this._stopped = false
    this._stopController = newAbortController()
    this._stopSignal = this._stopController.signal
    this._arm()
  }

  /** When the next tick is due, or null once stopped (or when `when` has no future tick). */
  get nextRun() {
    return this._stopped || this._next === null ? null : new Date(this._next)
  }

  /** This process's last tick of the job: its run record (skipped ticks too), or null. */
  get lastRun() {
    return this._lastRun
  }

  /** Whether fn runs in this process now. */
  get running() {
    return this._current !== null
  }

  /** Sets the timer for the next tick after now. */
  _arm() {
    if (this._stopped) return
    const now = Date.now()
    this._next = this._nextAfter(now)
    if (this._next === null) return
    this._timer = timers.setTimeout(() => this._onTimer(), Math.min(Math.max(this._next - now, 0), v.MAX_MS))
  }

  _onTimer() {
    this._timer = null
    if (this._stopped) return
    const tick = this._next
    // Early (a timer longer than setTimeout allows, or a clock that moved): wait the rest.
    if (Date.now() < tick) {
      this._timer = timers.setTimeout(() => this._onTimer(), Math.min(tick - Date.now(), v.MAX_MS))
      return
    }
    // Ticks missed meanwhile (a blocked event loop) are not run: the next one is after now.
    this._arm()
    this._fire(tick)
  }

  _fire(tick) {
    if (this._current !== null) {
      // Still running the previous tick here: skipped, not queued.
      const run = toRun({ name: this.name, tick, outcome: 'skipped', startedAt: Date.now(), nextDue: this._next })
      run.reason = 'running'
      this._lastRun = run
      observe.jobRun(this._client, run, null)
      return
    }
    const running = runTick(this._client, this.name, this._fn, this._o, tick, this).then(({ run, error }) => {
      this._lastRun = run
      if (error !== null && (run.outcome === 'failed' || run.outcome === 'lost' || run.outcome === 'error')) this._report(error, run)
    }, (err) => this._report(err, null)).finally(() => {
      if (this._current === running) this._current = null
    })
    this._current = running
  }

  /** Hands an error to `onError`, or to a process warning without one. */
  _report(err, run) {
    if (this._o.onError !== undefined) {
      try {
        this._o.onError(err, run)
      } catch (e) {
        process.nextTick(() => { throw e })
      }
    } else {
      process.emitWarning(`deadbolt job "${this.name}": ${run?.outcome ?? 'error'} (${err?.code ?? err?.name ?? 'error'})`, { code: 'DEADBOLT_JOB_FAILED' })
    }
  }

  /**
   * Stops scheduling ticks. A run in progress here may finish within `stopTimeout` ms; then
   * its signal aborts (a LockAbortedError) and it gets as long again. The lock is then kept
   * until `atLeastFor` after the run's start, or released. Resolves once that is done (or the
   * second bound passed). Idempotent.
   */
  async stop() {
    if (!this._stopped) {
      this._stopped = true
      this._client._jobs.delete(this)
      if (this._timer !== null) timers.clearTimeout(this._timer)
      this._timer = null
    }
    const running = this._current
    if (running === null) return
    if (await settledWithin(running, this._o.stopTimeout)) return
    if (!this._stopSignal.aborted) this._stopController.abort(new LockAbortedError(`Job "${this.name}" was stopped`))
    await settledWithin(running, this._o.stopTimeout)
  }

  toJSON() {
    return { name: this.name, nextRun: this.nextRun, running: this.running, lastRun: this._lastRun }
  }
}

/** Whether `promise` settles within `ms` ms. */
function settledWithin(promise, ms) {
  return new Promise((resolve) => {
    const timer = timers.setTimeout(() => resolve(false), ms)
    promise.then(() => {
      timers.clearTimeout(timer)
      resolve(true)
    }, () => {
      timers.clearTimeout(timer)
      resolve(true)
    })
  })
}

/** `locks.schedule(name, when, fn, options)`: see Job. */
function schedule(client, name, when, fn, options) {
  checkJobName(name)
  const o = checkRunOptions(options, SCHEDULE_OPTIONS)
  const nextAfter = parseWhen(when, o.timezone)
  v.checkFunction(fn, 'fn')
  client._native()
  if (client._stoppingJobs !== null) throw new LockClosedError('The lock client is closing')
  const job = new Job(client, name, nextAfter, fn, o)
  client._jobs.add(job)
  return job
}

/**
 * `locks.runOnce(name, fn, options)`: runs fn once if the job's lock is free (and, with
 * `tick`, if the record does not show that tick run). Resolves `{ ran: true, result, run }`, or
 * `{ ran: false, result: undefined, run }` when skipped; rejects with fn's error, the
 * LockLostError if the lock was lost meanwhile, or the store's error.
 */
async function runOnce(client, name, fn, options) {
  checkJobName(name)
  const o = checkRunOptions(options, RUN_ONCE_OPTIONS)
  v.checkFunction(fn, 'fn')
  client._native()
  const { run, result, error } = await runTick(client, name, fn, o, o.tick, undefined)
  if (error !== null) throw error
  return { ran: run.outcome === 'ran', result, run }
}

/**
 * `locks.jobs(options)`: the last run record in the store of every job (whose name starts
 * with `options.prefix`, at most `options.limit`), by name.
 */
async function listJobs(client, options) {
  let limit = 1000
  let prefix = ''
  if (options !== undefined) {
    v.checkObject(options, 'options')
    v.checkKnownKeys(options, JOBS_OPTIONS, 'options')
    const l = v.own(options, 'limit')
    if (l !== undefined) limit = v.checkInt(l, 'options.limit', 1, 1_000_000)
    const p = v.own(options, 'prefix')
    if (p !== undefined) {
      if (typeof p !== 'string') throw v.typeError('options.prefix', 'of type string', p)
      prefix = v.checkWellFormed(p, 'options.prefix')
    }
  }
  const held = await client.list(RECORD_PREFIX + prefix, { limit })
  const runs = []
  for (const info of held) {
    const run = parseRecord(info.data)
    if (run !== null) runs.push(run)
  }
  return runs.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
}

/** Stops every job of `client` (its close()). */
async function stopJobs(client) {
  await Promise.all([...client._jobs].map((job) => job.stop()))
}

module.exports = { schedule, runOnce, listJobs, stopJobs, assertLocked, Job, JobContext, RECORD_PREFIX }
