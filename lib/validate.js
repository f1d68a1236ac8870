'use strict'
// Argument checks. Bad input is refused here, before any I/O, with a TypeError or RangeError
// that names the argument and carries Node's conventional code.

const MAX_KEY_BYTES = 1024
const MAX_DATA_BYTES = 1024 * 1024
// setTimeout's ceiling; also far beyond any sane lease.
const MAX_MS = 2 ** 31 - 1

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

function checkKey(key, name = 'key') {
  if (typeof key !== 'string') throw typeError(name, 'of type string', key)
  if (key.length === 0) throw valueError(name, 'must not be empty', key)
  if (key.length > MAX_KEY_BYTES / 3 && Buffer.byteLength(key) > MAX_KEY_BYTES) {
    throw rangeError(`${name}.length`, `at most ${MAX_KEY_BYTES} bytes`, Buffer.byteLength(key))
  }
  return key
}

/** A whole number of milliseconds in [min, MAX_MS]. */
function checkInt(value, name, min = 1) {
  if (typeof value !== 'number') throw typeError(name, 'of type number', value)
  if (!Number.isInteger(value) || value < min || value > MAX_MS) {
    throw rangeError(name, `an integer >= ${min} and <= ${MAX_MS}`, value)
  }
  return value
}

/** A duration that may be fractional, zero or Infinity. */
function checkWait(value, name) {
  if (typeof value !== 'number') throw typeError(name, 'of type number', value)
  if (Number.isNaN(value) || value < 0) throw rangeError(name, '>= 0 (or Infinity)', value)
  return value
}

function checkNumber(value, name, min, max) {
  if (typeof value !== 'number') throw typeError(name, 'of type number', value)
  if (Number.isNaN(value) || value < min || value > max) throw rangeError(name, `>= ${min} and <= ${max}`, value)
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

function checkObject(value, name) {
  if (value === null || typeof value !== 'object') throw typeError(name, 'of type object', value)
  return value
}

function checkSignal(value, name) {
  if (value === null || typeof value !== 'object' || typeof value.aborted !== 'boolean' || typeof value.addEventListener !== 'function') {
    throw typeError(name, 'an instance of AbortSignal', value)
  }
  return value
}

/** Payloads are stored with a one-byte type tag so `inspect` gives back a string or a Buffer. */
function encodeData(value, name) {
  let buf
  if (typeof value === 'string') buf = Buffer.concat([Buffer.from('s'), Buffer.from(value)])
  else if (value instanceof Uint8Array) buf = Buffer.concat([Buffer.from('b'), value])
  else throw typeError(name, 'of type string or an instance of Buffer or Uint8Array', value)
  if (buf.length - 1 > MAX_DATA_BYTES) throw rangeError(`${name}.length`, `at most ${MAX_DATA_BYTES} bytes`, buf.length - 1)
  return buf
}

function decodeData(buf) {
  if (!buf || buf.length === 0) return null
  const body = buf.subarray(1)
  // A payload written by something other than deadbolt has no tag: give it back as bytes.
  if (buf[0] === 0x73) return body.toString()
  if (buf[0] === 0x62) return Buffer.from(body)
  return Buffer.from(buf)
}

module.exports = {
  MAX_KEY_BYTES,
  MAX_DATA_BYTES,
  MAX_MS,
  typeError,
  rangeError,
  valueError,
  checkKey,
  checkInt,
  checkWait,
  checkNumber,
  checkBoolean,
  checkFunction,
  checkObject,
  checkSignal,
  encodeData,
  decodeData,
}
