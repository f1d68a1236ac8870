'use strict'
// `deadbolt/otel`: OpenTelemetry spans and metrics, built on deadbolt's diagnostics channels
// (lib/observe.js) and `@opentelemetry/api` alone (an optional peer dependency: without an SDK
// registered it is a no-op). `instrument()` subscribes; the function it returns unsubscribes.
//
//   spans    lock.acquire  the wait, with its result
//            lock.hold     from the grant to the release or the loss (error status when lost)
//   metrics  deadbolt.lock.acquire.duration  histogram, s (store, kind, name, result)
//            deadbolt.lock.hold.duration     histogram, s
//            deadbolt.lock.held / .pending   up-down counters: held by, waiting in, this process
//            deadbolt.lock.lost              counter (error.type: the cause)
//            deadbolt.lock.extensions        counter (deadbolt.result)
//            deadbolt.job.runs               counter (store, name, deadbolt.result: ran,
//                                            skipped, failed; failed counts lost and error too)
//            deadbolt.job.duration           histogram, s (runs that called fn)

const dc = require('diagnostics_channel')
// perf_hooks, not the global: jest 25/26 environments lack `performance`.
const { performance } = require('perf_hooks')
const { version } = require('../package.json')
const v = require('./validate')

/** The options `instrument` takes. */
const INSTRUMENT_OPTIONS = new Set(['tracerProvider', 'meterProvider', 'lockName', 'cardinalityLimit'])

/**
 * The most (store, kind, lock name) series the metrics get by default; the acquisitions of
 * further names are counted in one overflow series (see `instrument`). With up to five results
 * per name, the acquisition histogram stays under the SDK's own default limit of 2000 points.
 */
const DEFAULT_CARDINALITY_LIMIT = 250

/** The attributes of the overflow series, as the OpenTelemetry SDKs' cardinality limit names it. */
const OVERFLOW_ATTRIBUTES = Object.freeze({ 'otel.metric.overflow': true })

/**
 * Bucket boundaries in seconds (the SDK's default ones, 0 5 10 25 … 10000, are meant for
 * milliseconds: every wait under 5 s would fall into one bucket). Waits: 1 ms to a minute;
 * holds: to an hour.
 */
const ACQUIRE_BUCKETS = Object.freeze([0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60])
const HOLD_BUCKETS = Object.freeze([...ACQUIRE_BUCKETS, 300, 900, 3600])

// What a key's identifiers look like, each replaced by `*` (in this order: an e-mail's or a
// UUID's digits must not be taken first).
const EMAIL = /[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+/g
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi
/** A ULID: 26 characters of Crockford's base32, the first 0–7. */
const ULID = /(?<![A-Za-z0-9])[0-7][0-9A-HJKMNP-TV-Z]{25}(?![A-Za-z0-9])/gi
/** Hex of 12 characters or more with a digit in it: SHA-1, SHA-256, MongoDB ids, … */
const HEX = /(?<![A-Za-z0-9])(?=[a-f]*[0-9])[0-9a-f]{12,}(?![A-Za-z0-9])/gi
/** A word of 16 characters or more in base64's or base64url's alphabet (tested by `random`). */
const WORD = /[A-Za-z0-9+/_-]{16,}={0,2}/g
const DIGITS = /[0-9]+/g
/**
 * Whether `s` has what UUIDs, ULIDs, hex digests and base64 ids all have: a run of 12
 * characters of `[A-Za-z0-9+/_=-]`. A loop, not a regular expression: the expression tried
 * the run at every position, the largest share of this module's time per acquisition.
 */
function hasLongWord(s) {
  let run = 0
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    if ((c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 47 && c <= 57) || c === 43 || c === 45 || c === 61 || c === 95) {
      if (++run >= 12) return true
    } else {
      run = 0
    }
  }
  return false
}

/** The class of a character for `random`: lower case, upper case, digit, or -1 for the others. */
function classOf(c) {
  if (c >= 97 && c <= 122) return 0
  if (c >= 65 && c <= 90) return 1
  if (c >= 48 && c <= 57) return 2
  return -1
}

/**
 * Whether a long word looks random (a base64 id, a nanoid…) rather than written (`camelCase`,
 * `snake_case_v2`, `api/v1/users`): between one letter or digit and the next, the class (lower
 * case, upper case, digit) changes at three steps in five in random text, and at few in words.
 */
function random(word) {
  let changes = 0
  let steps = -1
  let last = -1
  for (let i = 0; i < word.length; i++) {
    const c = classOf(word.charCodeAt(i))
    if (c < 0) continue
    if (last >= 0 && c !== last) changes++
    last = c
    steps++
  }
  return steps >= 11 && changes >= 0.4 * steps
}

/**
 * The default `deadbolt.lock.name` of a key: the key with its identifiers replaced by `*`:
 * e-mail addresses, UUIDs, ULIDs, hex digests, base64 ids and runs of digits (`order:1234` and
 * `order:98` are both `order:*`), so that the metrics' cardinality stays bounded by the shapes
 * of the keys, not their number.
 */
function defaultLockName(key) {
  let name = key
  // Each pattern only where it may match: most keys have no '@' and no long word.
  if (name.includes('@')) name = name.replace(EMAIL, '*')
  if (hasLongWord(name)) {
    name = name.replace(UUID, '*').replace(ULID, '*').replace(HEX, '*').replace(WORD, (w) => (random(w) ? '*' : w))
  }
  return name.replace(DIGITS, '*')
}

/**
 * Records in reused slots of an array (see `instrument`): `add` gives a record (with a `slot`
 * field) its place, `take` removes it if it is still there (a record taken twice, or never
 * added, gives undefined), `takeAll` removes and returns every one.
 */
class Slots {
  constructor() {
    this.slots = []
    this.free = []
  }

  add(rec) {
    const slot = this.free.length > 0 ? this.free.pop() : this.slots.length
    this.slots[slot] = rec
    rec.slot = slot
    return rec
  }

  take(rec) {
    if (rec === undefined || rec.slot < 0 || this.slots[rec.slot] !== rec) return undefined
    this.slots[rec.slot] = undefined
    this.free.push(rec.slot)
    rec.slot = -1
    return rec
  }

  takeAll() {
    const all = this.slots.filter((rec) => rec !== undefined)
    for (const rec of all) rec.slot = -1
    this.slots = []
    this.free = []
    return all
  }
}

/** `@opentelemetry/api`, or an error saying to install it (it is an optional peer dependency). */
function loadApi() {
  try {
    return require('@opentelemetry/api')
  } catch (cause) {
    const err = new Error('deadbolt/otel needs @opentelemetry/api: npm install @opentelemetry/api', { cause })
    err.code = 'ERR_LOCK_OTEL_API_MISSING'
    throw err
  }
}

/**
 * Instruments every deadbolt client of this process. `options`: `tracerProvider` and
 * `meterProvider` (default: the global ones), `lockName(key)` (default: `defaultLockName`),
 * `cardinalityLimit` (the most lock-name series; the names past it share one series with the
 * attribute `otel.metric.overflow: true`). Returns a function that undoes it (ending the spans
 * still open).
 */
function instrument(options = {}) {
  v.checkObject(options, 'options')
  v.checkKnownKeys(options, INSTRUMENT_OPTIONS, 'options')
  const { tracerProvider, meterProvider, lockName = defaultLockName, cardinalityLimit = DEFAULT_CARDINALITY_LIMIT } = options
  if (typeof lockName !== 'function') throw v.typeError('options.lockName', 'of type function', lockName)
  if (typeof cardinalityLimit !== 'number') throw v.typeError('options.cardinalityLimit', 'of type number', cardinalityLimit)
  if (!Number.isSafeInteger(cardinalityLimit) || cardinalityLimit < 1) throw v.rangeError('options.cardinalityLimit', 'an integer >= 1', cardinalityLimit)
  if (tracerProvider !== undefined && typeof tracerProvider?.getTracer !== 'function') throw v.typeError('options.tracerProvider', 'a TracerProvider (with getTracer)', tracerProvider)
  if (meterProvider !== undefined && typeof meterProvider?.getMeter !== 'function') throw v.typeError('options.meterProvider', 'a MeterProvider (with getMeter)', meterProvider)
  const api = loadApi()
  const tracer = (tracerProvider ?? api.trace.getTracerProvider()).getTracer('deadbolt', version)
  const meter = (meterProvider ?? api.metrics.getMeterProvider()).getMeter('deadbolt', version)

  const acquireDuration = meter.createHistogram('deadbolt.lock.acquire.duration', { unit: 's', description: 'How long acquisitions waited, by result', advice: { explicitBucketBoundaries: ACQUIRE_BUCKETS } })
  const holdDuration = meter.createHistogram('deadbolt.lock.hold.duration', { unit: 's', description: 'How long locks were held, from the grant to the release or loss', advice: { explicitBucketBoundaries: HOLD_BUCKETS } })
  // Asynchronous up-down counters: the counts are kept here and observed at collection, so an
  // acquisition pays an addition, not four attribute-hashing records of the SDK.
  const heldCount = meter.createObservableUpDownCounter('deadbolt.lock.held', { unit: '{lock}', description: 'Locks held by this process' })
  const pendingCount = meter.createObservableUpDownCounter('deadbolt.lock.pending', { unit: '{acquisition}', description: 'Acquisitions waiting in this process' })
  const lostCount = meter.createCounter('deadbolt.lock.lost', { unit: '{lock}', description: 'Held locks lost, by cause (error.type)' })
  const extensions = meter.createCounter('deadbolt.lock.extensions', { unit: '{extension}', description: 'Lease extensions (extend() and heartbeats), by result' })

  const jobRuns = meter.createCounter('deadbolt.job.runs', { unit: '{run}', description: 'Ticks of scheduled jobs and runOnce calls, by result (ran, skipped, failed)' })
  const jobDuration = meter.createHistogram('deadbolt.job.duration', { unit: 's', description: 'How long job runs took, from taking the lock to their end' })

  /**
   * Acquisitions under way ({ span, s }, its slot on the context under `ACQUIRING`) and holds
   * ({ span, s, at }, its slot on the Lock under `HOLD`, removed at release or loss). Slots,
   * not `Map`s keyed by the contexts and locks: a `Map` churned at every operation keeps the
   * dead entries of its old tables reachable, so every scavenge promoted the records, spans
   * and locks of the pairs it met (lib/id-map.js; bench/PROFILE.md).
   */
  const acquiring = new Slots()
  const holds = new Slots()
  const ACQUIRING = Symbol('deadbolt/otel acquisition')
  const HOLD = Symbol('deadbolt/otel hold')

  /**
   * One series per store, kind and lock name: its attributes (made once, frozen: the SDK reads
   * them at every record), those with each result, and the held and pending counts. At most
   * `cardinalityLimit` of them; the names past it share `overflow`. A series is kept when
   * nothing is held or pending in it: the SDK goes on exporting it (cumulative) at its last
   * value, which must be observed as 0 rather than left stale, and the limit bounds them.
   */
  const series = new Map()
  const overflow = { attrs: OVERFLOW_ATTRIBUTES, byResult: new Map(), held: 0, pending: 0 }
  let warned = false
  /**
   * `lockName(key)`; if it throws, the default name and one process warning: an exception in
   * a channel subscriber would be rethrown as an uncaught exception, crashing the process.
   */
  function nameOf(key) {
    try {
      return String(lockName(key))
    } catch (err) {
      if (!warned) {
        warned = true
        process.emitWarning(`deadbolt/otel: lockName threw (${err?.message ?? err}); the default lock name is used instead`, { code: 'DEADBOLT_OTEL_LOCK_NAME' })
      }
      return defaultLockName(key)
    }
  }
  function seriesOf(ctx) {
    const name = nameOf(ctx.key)
    const id = `${ctx.store}\u0000${ctx.kind}\u0000${name}`
    let s = series.get(id)
    if (s === undefined) {
      if (series.size >= cardinalityLimit) return overflow
      const attrs = Object.freeze({ 'deadbolt.store': ctx.store, 'deadbolt.lock.kind': ctx.kind, 'deadbolt.lock.name': name })
      s = { attrs, byResult: new Map(), held: 0, pending: 0 }
      series.set(id, s)
    }
    return s
  }
  function withResult(s, result) {
    let a = s.byResult.get(result)
    if (a === undefined) {
      a = Object.freeze({ ...s.attrs, 'deadbolt.result': result })
      s.byResult.set(result, a)
    }
    return a
  }
  function observeAll(result, count) {
    for (const s of series.values()) result.observe(s[count], s.attrs)
    if (series.size >= cardinalityLimit) result.observe(overflow[count], overflow.attrs)
  }
  const observeHeld = (result) => observeAll(result, 'held')
  const observePending = (result) => observeAll(result, 'pending')
  heldCount.addCallback(observeHeld)
  pendingCount.addCallback(observePending)

  function onAcquireStart(ctx) {
    const s = seriesOf(ctx)
    const span = tracer.startSpan('lock.acquire', {
      kind: api.SpanKind.INTERNAL,
      attributes: { ...s.attrs, 'deadbolt.lock.key': ctx.key, 'deadbolt.lock.ttl_ms': ctx.ttl, 'deadbolt.lock.permits': ctx.permits },
    })
    ctx[ACQUIRING] = acquiring.add({ span, s, slot: -1 })
    s.pending++
  }

  function onAcquireSettled(ctx) {
    const rec = acquiring.take(ctx[ACQUIRING])
    if (rec === undefined) return
    const { span, s } = rec
    const attrs = s.attrs
    span.setAttribute('deadbolt.result', ctx.result)
    const token = ctx.fencingToken == null ? undefined : String(ctx.fencingToken)
    if (token !== undefined) span.setAttribute('deadbolt.lock.fencing_token', token)
    if (ctx.error !== undefined) {
      span.setStatus({ code: api.SpanStatusCode.ERROR, message: ctx.result })
      if (ctx.error?.code !== undefined) span.setAttribute('error.type', String(ctx.error.code))
    }
    span.end()
    s.pending--
    acquireDuration.record(ctx.waitedMs / 1000, withResult(s, ctx.result))
    if (ctx.result === 'granted' && ctx.lock !== undefined) {
      const holdAttrs = { ...attrs, 'deadbolt.lock.key': ctx.key }
      if (token !== undefined) holdAttrs['deadbolt.lock.fencing_token'] = token
      const hold = tracer.startSpan('lock.hold', {
        kind: api.SpanKind.INTERNAL,
        attributes: holdAttrs,
        links: [{ context: span.spanContext() }],
      })
      // The instant acquireSettled took for the wait's end (lib/observe.js): no second clock read.
      ctx.lock[HOLD] = holds.add({ span: hold, s, at: ctx.startedAt + ctx.waitedMs, slot: -1 })
      s.held++
    }
  }

  /** Ends the hold of `lock` (lost: with its cause). */
  function endHold(lock, cause) {
    const rec = holds.take(lock?.[HOLD])
    if (rec !== undefined) endRecord(rec, cause)
  }

  /** Ends the hold `rec` (taken from `holds`). */
  function endRecord(rec, cause) {
    if (cause !== undefined) {
      rec.span.setStatus({ code: api.SpanStatusCode.ERROR, message: `lost: ${cause}` })
      rec.span.setAttribute('error.type', cause)
    }
    rec.span.end()
    rec.s.held--
    holdDuration.record((performance.now() - rec.at) / 1000, rec.s.attrs)
  }

  const acquireHandlers = { start: onAcquireStart, asyncEnd: onAcquireSettled }
  const releaseHandlers = {
    asyncEnd(ctx) {
      // Whatever the store answered (the lease may have ended already), the holder let go.
      endHold(ctx.lock)
    },
  }
  const extendHandlers = {
    asyncEnd(ctx) {
      extensions.add(1, withResult(seriesOf(ctx), ctx.result))
    },
  }
  const onLost = (msg) => {
    // A lease its holder stopped extending lapsed as asked (a handover): the hold ends, but
    // nothing was lost.
    if (msg.stopped) return endHold(msg.lock)
    lostCount.add(1, { ...seriesOf(msg).attrs, 'error.type': msg.cause })
    endHold(msg.lock, msg.cause)
  }

  const onJob = (msg) => {
    const result = msg.outcome === 'ran' || msg.outcome === 'skipped' ? msg.outcome : 'failed'
    const attrs = { 'deadbolt.store': msg.store, 'deadbolt.lock.name': nameOf(msg.name), 'deadbolt.result': result }
    jobRuns.add(1, attrs)
    if (msg.outcome !== 'skipped' && msg.outcome !== 'error' && msg.durationMs !== null) jobDuration.record(msg.durationMs / 1000, attrs)
  }

  const acquireChannel = dc.tracingChannel('deadbolt:acquire')
  const releaseChannel = dc.tracingChannel('deadbolt:release')
  const extendChannel = dc.tracingChannel('deadbolt:extend')
  acquireChannel.subscribe(acquireHandlers)
  releaseChannel.subscribe(releaseHandlers)
  extendChannel.subscribe(extendHandlers)
  dc.subscribe('deadbolt:lost', onLost)
  dc.subscribe('deadbolt:job', onJob)

  let undone = false
  return function uninstrument() {
    if (undone) return
    undone = true
    acquireChannel.unsubscribe(acquireHandlers)
    releaseChannel.unsubscribe(releaseHandlers)
    extendChannel.unsubscribe(extendHandlers)
    dc.unsubscribe('deadbolt:lost', onLost)
    dc.unsubscribe('deadbolt:job', onJob)
    // What is still open is no longer watched: end it now rather than never.
    for (const { span, s } of acquiring.takeAll()) {
      span.end()
      s.pending--
    }
    for (const rec of holds.takeAll()) endRecord(rec)
    heldCount.removeCallback(observeHeld)
    pendingCount.removeCallback(observePending)
  }
}

module.exports = { instrument, defaultLockName }
