'use strict'
// Argument checks. Bad input is refused here, before any I/O, with a TypeError or RangeError
// that names the argument and carries Node's conventional code.

// The limits are defined once, in the addon (src/limits.rs).
const { limits } = require('./addon')

/** The addon's limits and defaults, read once for every module here. */
const LIMITS = limits()
const L = LIMITS
const MAX_KEY_BYTES = L.maxKeyBytes
const MAX_DATA_BYTES = L.maxDataBytes
// setTimeout's ceiling; also far beyond any sane lease.
const MAX_MS = L.maxMs

function describe(value) {
  if (value === null) return 'null'
  if (typeof value === 'function') return `function ${value.name || '(anonymous)'}`
  if (typeof value === 'object') return `an instance of ${value.constructor?.name ?? 'Object'}`
  if (typeof value === 'string') return `type string (${JSON.stringify(value.length > 28 ? value.slice(0, 25) + '...' : value)})`
  return `type ${typeof value} (${String(value)})`
}

function typeError(name, expected, value) {
  const err = new TypeError(`The "${name}" argument must be ${expected}. Received ${describe(value)}`)
  err.code = 'ERR_INVALID_ARG_TYPE'
  return err
}

function rangeError(name, expected, value) {
  const err = new RangeError(`The value of "${name}" is out of range. It must be ${expected}. Received ${typeof value === 'string' ? JSON.stringify(value) : String(value)}`)
  err.code = 'ERR_OUT_OF_RANGE'
  return err
}

function valueError(name, reason, value) {
  const err = new TypeError(`The argument '${name}' ${reason}. Received ${describe(value)}`)
  err.code = 'ERR_INVALID_ARG_VALUE'
  return err
}

/**
 * Refuses a string with a lone surrogate: UTF-8 has no encoding for one, so it would reach the
 * store as U+FFFD and two distinct JS strings would become one key (or a payload would not
 * come back as it went in). V8 answers in O(1) for one-byte strings, so the common ASCII key
 * costs a few ns.
 */
function checkWellFormed(value, name) {
  if (!value.isWellFormed()) throw valueError(name, LONE_SURROGATE, value)
  return value
}

const LONE_SURROGATE = 'must not contain lone surrogates (they have no UTF-8 encoding)'

function checkKey(key, name = 'key') {
  if (typeof key !== 'string') throw typeError(name, 'of type string', key)
  if (key.length === 0) throw valueError(name, 'must not be empty', key)
  if (!key.isWellFormed()) throw valueError(name, LONE_SURROGATE, key)
  if (key.length > MAX_KEY_BYTES / 3 && Buffer.byteLength(key) > MAX_KEY_BYTES) {
    throw rangeError(`${name}.length`, `at most ${MAX_KEY_BYTES} bytes`, Buffer.byteLength(key))
  }
  return key
}

/** A whole number in [min, max] (by default a number of milliseconds in [1, MAX_MS]). */
function checkInt(value, name, min = 1, max = MAX_MS) {
  if (typeof value !== 'number') throw typeError(name, 'of type number', value)
  if (!Number.isInteger(value) || value < min || value > max) {
    throw rangeError(name, `an integer >= ${min} and <= ${max}`, value)
  }
  return value
}

/**
 * A duration in ms that may be fractional or zero: a finite number in [0, MAX_MS], or
 * Infinity (no limit). Larger finite values are refused: they are no sane deadline and the
 * native side cannot represent them all as a point in time.
 */
function checkWait(value, name) {
  if (typeof value !== 'number') throw typeError(name, 'of type number', value)
  if (!(value >= 0 && value <= MAX_MS) && value !== Infinity) throw rangeError(name, `>= 0 and <= ${MAX_MS}, or Infinity`, value)
  return value
}

function checkNumber(value, name, min, max) {
  if (typeof value !== 'number') throw typeError(name, 'of type number', value)
  if (!(value >= min && value <= max)) throw rangeError(name, `>= ${min} and <= ${max}`, value)
  return value
}

function checkBoolean(value, name) {
  if (typeof value !== 'boolean') throw typeError(name, 'of type boolean', value)
  return value
}

function checkFunction(value, name) {
  if (typeof value !== 'function') throw typeError(name, 'of type function', value)
  return value
}

/**
 * Whether `value` is a plain object: an object literal (its prototype is Object.prototype, of
 * this realm or another: a vm context, jest's environments) or one with a null prototype.
 * Options are read from own properties, so an Array, Date, Map, RegExp, boxed primitive or
 * class instance would be taken as `{}` (or as its index keys): it is refused instead, and so
 * is an object inheriting from another (its inherited options would be ignored silently).
 */
function isPlainObject(value) {
  if (value === null || typeof value !== 'object') return false
  const proto = Object.getPrototypeOf(value)
  if (proto === null || proto === Object.prototype) return true
  if (Object.getPrototypeOf(proto) !== null) return false
  const ctor = Object.getOwnPropertyDescriptor(proto, 'constructor')?.value
  return typeof ctor === 'function' && ctor.name === 'Object'
}

/** An options object: a plain object (see isPlainObject), else a TypeError naming `name`. */
function checkObject(value, name) {
  if (!isPlainObject(value)) throw typeError(name, 'a plain object', value)
  return value
}

/** An AbortSignal, by shape (so that one from another realm passes too). */
function checkSignal(value, name) {
  if (value === null || typeof value !== 'object' || typeof value.aborted !== 'boolean' ||
      typeof value.addEventListener !== 'function' || typeof value.removeEventListener !== 'function') {
    throw typeError(name, 'an instance of AbortSignal', value)
  }
  return value
}

const TAG_STRING = Buffer.from('s')
const TAG_BYTES = Buffer.from('b')

/** Payloads are stored with a one-byte type tag so `inspect` gives back a string or a Buffer. */
function encodeData(value, name) {
  let size
  if (typeof value === 'string') {
    checkWellFormed(value, name)
    size = Buffer.byteLength(value)
  } else if (value instanceof Uint8Array) {
    size = value.byteLength
  } else {
    throw typeError(name, 'of type string or an instance of Buffer or Uint8Array', value)
  }
  // Measured before anything is copied.
  if (size > MAX_DATA_BYTES) throw rangeError(`${name}.length`, `at most ${MAX_DATA_BYTES} bytes`, size)
  return typeof value === 'string' ? Buffer.concat([TAG_STRING, Buffer.from(value)]) : Buffer.concat([TAG_BYTES, value])
}

const isOwnEnumerable = Function.prototype.call.bind(Object.prototype.propertyIsEnumerable)

/**
 * The value of `object[name]` if it is an own enumerable property (one that a spread would
 * copy), else undefined: options never pick up what someone put on Object.prototype.
 */
function own(object, name) {
  return isOwnEnumerable(object, name) ? object[name] : undefined
}

function decodeData(buf) {
  if (!buf || buf.length === 0) return null
  const body = buf.subarray(1)
  // A payload written by something other than deadbolt has no tag: give it back as bytes.
  if (buf[0] === 0x73) return body.toString()
  if (buf[0] === 0x62) return Buffer.from(body)
  return Buffer.from(buf)
}

/** Edit distance of two short strings (insertions, deletions, substitutions). */
function distance(a, b) {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const cur = [i]
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1))
    }
    prev = cur
  }
  return prev[b.length]
}

/**
 * Refuses an own key of `options` that is not in `known` (a misspelt option would otherwise
 * be ignored silently: `{ tll: 5000 }`), naming it and the closest known key.
 */
function checkKnownKeys(options, known, name) {
  for (const k of Object.keys(options)) {
    if (known.has(k)) continue
    let best = null
    let bestDistance = Infinity
    for (const candidate of known) {
      const d = distance(k.toLowerCase(), candidate.toLowerCase())
      if (d < bestDistance) { best = candidate; bestDistance = d }
    }
    const hint = best !== null && bestDistance <= Math.max(2, Math.floor(best.length / 3)) ? ` Did you mean "${best}"?` : ''
    const err = new TypeError(`The argument '${name}' has an unknown option "${k.length > 40 ? k.slice(0, 37) + '...' : k}".${hint} Known options: ${[...known].join(', ')}`)
    err.code = 'ERR_INVALID_ARG_VALUE'
    throw err
  }
}

module.exports = {
  LIMITS,
  checkKnownKeys,
  MAX_KEY_BYTES,
  MAX_DATA_BYTES,
  MAX_MS,
  typeError,
  rangeError,
  valueError,
  own,
  checkWellFormed,
  checkKey,
  checkInt,
  checkWait,
  checkNumber,
  checkBoolean,
  checkFunction,
  checkObject,
  isPlainObject,
  checkSignal,
  encodeData,
  decodeData,
}
