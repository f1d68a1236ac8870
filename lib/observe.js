'use strict'
// What deadbolt publishes on `node:diagnostics_channel`, all of it in this one module: the
// primitives call in here at their start and settle points, and every call is guarded by the
// channels' `hasSubscribers`, so nothing is built or timed while nobody listens.
//
//   tracing channels  deadbolt:acquire  every acquisition (locks, permits, read/write holds,
//                                       each key of acquireAll, election campaigns)
//                     deadbolt:release  every release that reaches the store (and close())
//                     deadbolt:extend   extend() calls
//   plain channels    deadbolt:lost     a held lock was lost
//                     deadbolt:leader   an election candidate gained or lost leadership
//                     deadbolt:job      a scheduled job's tick or a runOnce call settled
//                                       (ran, failed, lost, skipped or error; lib/jobs.js)
//
// A tracing channel's events carry one context object from `start` to `asyncEnd`; its
// `result` is a word (`granted`, `refused`, …), not the call's return value, and `lock` is the
// Lock once granted (what a subscriber keys a hold on).

const dc = require('diagnostics_channel')
const { performance } = require('perf_hooks')

const acquireChannel = dc.tracingChannel('deadbolt:acquire')
const releaseChannel = dc.tracingChannel('deadbolt:release')
const extendChannel = dc.tracingChannel('deadbolt:extend')
const lostChannel = dc.channel('deadbolt:lost')
const leaderChannel = dc.channel('deadbolt:leader')
const jobChannel = dc.channel('deadbolt:job')

/** Whether anyone listens to any event of tracing channel `tc` (Node 20.0 lacks tc.hasSubscribers). */
function active(tc) {
  return tc.start.hasSubscribers || tc.end.hasSubscribers || tc.asyncStart.hasSubscribers ||
    tc.asyncEnd.hasSubscribers || tc.error.hasSubscribers
}

/**
 * What this module remembers of a lock granted while someone listened: its kind, store and
 * grant time (for `heldMs`), in the lock's `_observed` field (lib/lock.js); undefined or null
 * when it was granted while nobody listened.
 */
function observed(lock) {
  return lock._observed ?? undefined
}

/** The kind of a Lock or one of its subclasses (an election's lock is a plain Lock: see `observed`). */
function kindOf(lock) {
  const known = observed(lock)
  if (known !== undefined) return known.kind
  if (lock.permits === undefined) return 'lock'
  const mode = lock.mode
  return mode === undefined ? 'semaphore' : mode
}

function ms(since) {
  return since === undefined ? null : performance.now() - since
}

// ───────────────────────────── acquire ─────────────────────────────

/**
 * Publishes the start of an acquisition, or returns null at once when nobody listens.
 * `kind`: 'lock', 'semaphore', 'read', 'write' or 'election'; `ownerSeq`: the owner string,
 * or the client's sequence number for it; `adopted`: a lease taken over by owner (`adopt`).
 */
function acquireStart(client, key, kind, ttl, ownerSeq, permits, adopted = false) {
  if (!active(acquireChannel)) return null
  const ctx = {
    key,
    store: client._store,
    kind,
    ttl,
    // A sequence number stands for the client's prefix and that number (see Lock#owner).
    owner: typeof ownerSeq === 'string' ? ownerSeq : client._ownerPrefix + ownerSeq.toString(36),
    permits,
    adopted,
    result: undefined,
    fencingToken: undefined,
    waitedMs: undefined,
    lock: undefined,
    error: undefined,
    startedAt: performance.now(),
  }
  acquireChannel.start.publish(ctx)
  return ctx
}

/** The synchronous part of the acquisition `ctx` (from acquireStart) is done. */
function acquireEnd(ctx) {
  acquireChannel.end.publish(ctx)
}

/** Acquisition `ctx` settled: `result` and the Lock (granted) or the error (rejected). */
function acquireSettled(ctx, result, lock, err) {
  const now = performance.now()
  ctx.result = result
  ctx.waitedMs = now - ctx.startedAt
  if (lock !== null) {
    ctx.lock = lock
    ctx.fencingToken = lock.fencingToken
    lock._observed = { kind: ctx.kind, store: ctx.store, at: now }
  }
  if (err !== null) {
    ctx.error = err
    acquireChannel.error.publish(ctx)
  }
  acquireChannel.asyncStart.publish(ctx)
  acquireChannel.asyncEnd.publish(ctx)
}

/** The word for a rejected acquisition's error. */
function rejectedResult(err, signal) {
  if (err?.code === 'ERR_LOCK_ACQUISITION') return 'timeout'
  if (err?.code === 'ERR_LOCK_ABORTED' || (signal !== undefined && signal.aborted)) return 'aborted'
  return 'error'
}

/**
 * Remembers the grant time of a lock granted while nobody traced acquisitions but someone
 * listens for releases or losses (their `heldMs`).
 */
function noteGrant(lock, kind, store) {
  if (active(releaseChannel) || active(extendChannel) || lostChannel.hasSubscribers || leaderChannel.hasSubscribers) {
    lock._observed = { kind, store, at: performance.now() }
  }
}

// ───────────────────────────── release / extend ─────────────────────────────

function holdContext(lock, extra) {
  const known = observed(lock)
  return {
    key: lock.key,
    store: known?.store ?? lock._client._store,
    kind: kindOf(lock),
    owner: lock.owner,
    permits: lock.permits ?? 1,
    fencingToken: lock.fencingToken,
    lock,
    heldMs: ms(known?.at),
    ...extra,
  }
}

/**
 * Releases `lock` through `native` (its client's bridge), traced: resolves true when released.
 * With nobody listening this is `native.release(lock._id)` and nothing else.
 */
function traceRelease(lock, native) {
  if (!active(releaseChannel)) return native.release(lock._id)
  const ctx = holdContext(lock, { result: undefined, error: undefined })
  return trace(releaseChannel, ctx, () => native.release(lock._id), (released) => (released ? 'released' : 'not-held'))
}

/**
 * close() let go of `lock` with every other one: the same events as a release, with result
 * `left` for a lock its holder stopped extending (close() leaves it to lapse, or to its adopter).
 */
function releasedByClose(lock) {
  if (!active(releaseChannel)) return
  const ctx = holdContext(lock, { result: lock._extra?.stopped === true ? 'left' : 'released', error: undefined, closed: true })
  releaseChannel.start.publish(ctx)
  releaseChannel.end.publish(ctx)
  releaseChannel.asyncStart.publish(ctx)
  releaseChannel.asyncEnd.publish(ctx)
}

/** Traces an extension (`heartbeat`: false for extend() calls) of `ttl` ms. */
function traceExtend(lock, ttl, run) {
  if (!active(extendChannel)) return run()
  const ctx = holdContext(lock, { ttl, heartbeat: false, result: undefined, error: undefined })
  return trace(extendChannel, ctx, run, (ok) => (ok ? 'extended' : 'not-held'))
}

/**
 * Whether extensions are traced now: an auto-extended lock acquired then has the native side
 * report its heartbeats (one completion record each), one acquired before does not.
 */
function extensionsTraced() {
  return active(extendChannel)
}

/** A heartbeat extended `lock` (ok: true) or found it gone (ok: false); from the native side. */
function heartbeat(lock, ok) {
  if (!active(extendChannel)) return
  const ctx = holdContext(lock, { ttl: lock.ttl, heartbeat: true, result: ok ? 'extended' : 'not-held', error: undefined })
  extendChannel.start.publish(ctx)
  extendChannel.end.publish(ctx)
  extendChannel.asyncStart.publish(ctx)
  extendChannel.asyncEnd.publish(ctx)
}

/** Runs `run()` between `start`/`end` and publishes its settlement with `ctx.result`. */
function trace(tc, ctx, run, word) {
  tc.start.publish(ctx)
  let promise
  try {
    promise = run()
  } finally {
    tc.end.publish(ctx)
  }
  return promise.then((value) => {
    ctx.result = word(value)
    tc.asyncStart.publish(ctx)
    tc.asyncEnd.publish(ctx)
    return value
  }, (err) => {
    ctx.result = 'error'
    ctx.error = err
    tc.error.publish(ctx)
    tc.asyncStart.publish(ctx)
    tc.asyncEnd.publish(ctx)
    throw err
  })
}

// ───────────────────────────── lost / leader ─────────────────────────────

/**
 * `lock` was lost (`cause`: the native side's reason; `err`: the LockLostError; `stopped`: its
 * holder had stopped extending it, so the lease lapsed as asked).
 */
function lost(lock, cause, err, stopped = false) {
  if (!lostChannel.hasSubscribers) return
  lostChannel.publish(holdContext(lock, { cause, error: err, stopped }))
}

/** `lock` made its election's candidate leader (`elected`: true) or stopped being one. */
function leadership(lock, elected, reason) {
  if (!leaderChannel.hasSubscribers) return
  const known = observed(lock)
  leaderChannel.publish({
    key: lock.key,
    store: known?.store ?? lock._client._store,
    owner: lock.owner,
    term: lock.fencingToken,
    leader: elected,
    reason: elected ? null : reason,
    lock,
  })
}

/**
 * A job's tick (or a runOnce call) settled: publishes `run` (lib/jobs.js's record of it, with
 * the store's name and `error`, the error fn threw or the store's, if any).
 */
function jobRun(client, run, error) {
  if (!jobChannel.hasSubscribers) return
  jobChannel.publish({ ...run, store: client._store, error: error ?? null })
}

module.exports = {
  jobRun,
  acquireStart,
  acquireEnd,
  acquireSettled,
  rejectedResult,
  noteGrant,
  traceRelease,
  releasedByClose,
  traceExtend,
  extensionsTraced,
  heartbeat,
  lost,
  leadership,
  channels: { acquire: acquireChannel, release: releaseChannel, extend: extendChannel, lost: lostChannel, leader: leaderChannel, job: jobChannel },
}
