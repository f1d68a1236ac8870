'use strict'
// Acquire options: defaults (from the addon's limits), validation over a client's defaults, and
// the small frozen helpers every module here shares.

const v = require('./validate')
const L = v.LIMITS

/** Client-wide defaults of the acquire options (README: "Acquire options"). */
const DEFAULTS = Object.freeze({
  ttl: L.defaultTtl,
  wait: L.defaultWait,
  retryDelay: L.defaultRetryDelay,
  jitter: L.defaultJitter,
  autoExtend: false,
  maxHold: Infinity,
})

/** The options `acquire`, `tryAcquire` and `withLock` take. */
const ACQUIRE_OPTIONS = new Set(['ttl', 'wait', 'retryDelay', 'jitter', 'autoExtend', 'extendEvery', 'maxHold', 'data', 'signal', 'onLost', 'reentrant', 'fencing'])

/**
 * A ttl below this many ms is most likely seconds meant as milliseconds (`ttl: 30`): it is
 * still taken as given (short leases have their uses, and tests rely on them), with one
 * process warning that names the unit.
 */
const TTL_FLOOR_MS = 100
let warnedShortTtl = false

function warnShortTtl(ttl) {
  if (warnedShortTtl) return
  warnedShortTtl = true
  process.emitWarning(`deadbolt: ttl is in milliseconds: ttl ${ttl} is a ${ttl} ms lease, below ${TTL_FLOOR_MS} ms (for ${ttl} seconds, pass ttl: ${ttl * 1000}). Warned once per process.`, { code: 'DEADBOLT_SHORT_TTL' })
}

/** Default lease of an election, in ms. */
const ELECTION_TTL = L.defaultElectionTtl

/**
 * Validates acquire options over the client's defaults. Builds one fixed-shape object (no
 * spreads): this runs on every acquisition that passes options.
 */
function resolveAcquireOptions(defaults, options, waitDefault) {
  if (options === undefined || options === null) options = EMPTY
  else v.checkObject(options, 'options')
  // Own enumerable properties only, as a spread copies them: a value someone put on
  // Object.prototype must not change every lock. One pass over the keys costs less than a
  // hasOwn per option (this runs on every acquisition that passes options).
  let ttl, wait, retryDelay, jitter, autoExtend, extendEvery, maxHold, data, signal, onLost, reentrant, fencing
  for (const k of Object.keys(options)) {
    switch (k) {
      case 'ttl': ttl = options.ttl; break
      case 'wait': wait = options.wait; break
      case 'retryDelay': retryDelay = options.retryDelay; break
      case 'jitter': jitter = options.jitter; break
      case 'autoExtend': autoExtend = options.autoExtend; break
      case 'extendEvery': extendEvery = options.extendEvery; break
      case 'maxHold': maxHold = options.maxHold; break
      case 'data': data = options.data; break
      case 'signal': signal = options.signal; break
      case 'onLost': onLost = options.onLost; break
      case 'reentrant': reentrant = options.reentrant; break
      case 'fencing': fencing = options.fencing; break
      default: v.checkKnownKeys(options, ACQUIRE_OPTIONS, 'options')
    }
  }
  const o = {
    ttl: ttl ?? defaults.ttl,
    wait: wait ?? waitDefault,
    retryDelay: retryDelay ?? defaults.retryDelay,
    jitter: jitter ?? defaults.jitter,
    autoExtend: autoExtend ?? defaults.autoExtend,
    extendEvery,
    maxHold: maxHold ?? defaults.maxHold,
    encoded: undefined,
    signal,
    onLost,
    reentrant: reentrant ?? false,
    fencing: fencing ?? true,
  }
  v.checkInt(o.ttl, 'options.ttl')
  if (o.ttl < TTL_FLOOR_MS) warnShortTtl(o.ttl)
  v.checkWait(o.wait, 'options.wait')
  v.checkInt(o.retryDelay, 'options.retryDelay')
  v.checkNumber(o.jitter, 'options.jitter', 0, 1)
  v.checkBoolean(o.autoExtend, 'options.autoExtend')
  // The heartbeat period must be less than ttl, which matters only with a heartbeat or when
  // the caller chose a period: a plain `ttl: 1` lease is fine.
  const everyGiven = o.extendEvery !== undefined
  if (everyGiven) v.checkInt(o.extendEvery, 'options.extendEvery')
  else o.extendEvery = Math.max(1, Math.floor(o.ttl / 3))
  if (o.extendEvery >= o.ttl && (everyGiven || o.autoExtend)) {
    if (everyGiven) throw v.rangeError('options.extendEvery', `less than ttl (${o.ttl})`, o.extendEvery)
    throw v.rangeError('options.ttl', 'at least 2 with autoExtend (the heartbeat period must be less than ttl)', o.ttl)
  }
  v.checkWait(o.maxHold, 'options.maxHold')
  // A heartbeat that stops at once would resolve a lock already given up.
  if (o.maxHold === 0 && o.autoExtend) throw v.rangeError('options.maxHold', `> 0 and <= ${v.MAX_MS}, or Infinity, with autoExtend`, o.maxHold)
  if (data !== undefined) o.encoded = v.encodeData(data, 'options.data')
  if (o.signal !== undefined) v.checkSignal(o.signal, 'options.signal')
  if (o.onLost !== undefined) v.checkFunction(o.onLost, 'options.onLost')
  v.checkBoolean(o.reentrant, 'options.reentrant')
  v.checkBoolean(o.fencing, 'options.fencing')
  return o
}

const EMPTY = Object.freeze({})

// addEventListener reads `signal`, `capture`, `passive` from its options: a literal would
// find whatever someone put on Object.prototype.
const ONCE = Object.freeze(Object.assign(Object.create(null), { once: true }))

/** The own enumerable properties of `o` that are not undefined, on an object without a prototype. */
function stripUndefined(o) {
  const r = Object.create(null)
  for (const k of Object.keys(o)) if (o[k] !== undefined) r[k] = o[k]
  return r
}

/** Milliseconds on a monotonic clock (jest 25/26 environments lack `performance`). */
function now() {
  return Number(process.hrtime.bigint() / 1_000_000n)
}

module.exports = { DEFAULTS, ELECTION_TTL, EMPTY, ONCE, TTL_FLOOR_MS, now, resolveAcquireOptions, stripUndefined }
