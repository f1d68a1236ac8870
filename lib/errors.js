'use strict'
// Every error a caller can receive carries a stable `code`; nobody should match on messages.

const { scrub } = require('./redact')
const { tokenJSON } = require('./json')

/** How deep `errorJSON` follows a chain of causes. */
const MAX_CAUSES = 8

/**
 * What `JSON.stringify` shows of an error (an Error's own JSON has neither its name nor its
 * message): `name`, `code`, `message`, its own enumerable fields (a bigint as its decimal
 * string, an object only if it is an error) and its `cause`, the same way. Never the stack;
 * the messages are those the errors carry, already scrubbed of secrets. A cause that is not an
 * error (an abort reason) is shown if it is a string, number or boolean.
 */
function errorJSON(err, depth = 0) {
  if (!(err instanceof Error)) {
    if (typeof err === 'bigint') return String(err)
    return ['string', 'number', 'boolean'].includes(typeof err) ? err : undefined
  }
  const out = { name: err.name, code: err.code, message: err.message }
  for (const [k, value] of Object.entries(err)) {
    if (k in out || k === 'cause') continue
    if (value instanceof Error) out[k] = depth < MAX_CAUSES ? errorJSON(value, depth + 1) : undefined
    else if (typeof value === 'bigint') out[k] = String(value)
    else if (value === null || typeof value !== 'object') out[k] = value
  }
  if (err.cause !== undefined && depth < MAX_CAUSES) out.cause = errorJSON(err.cause, depth + 1)
  return out
}

/** Base class of deadbolt's lock errors. */
class LockError extends Error {
  constructor(message, options) {
    super(message, options)
    Object.defineProperty(this, 'name', { value: new.target.name, enumerable: false, writable: true, configurable: true })
  }

  /** What `JSON.stringify` shows: see `errorJSON`. */
  toJSON() {
    return errorJSON(this)
  }
}

function defineCode(Class, code) {
  Object.defineProperty(Class.prototype, 'code', { value: code, enumerable: true, writable: true, configurable: true })
  return Class
}

/** The lock was held by someone else when the wait or the retries ran out. */
class LockAcquisitionError extends LockError {}
/** Release of a lock that is not held, has expired or was taken. */
class LockReleaseError extends LockError {}
/** Extension of a lock that is not held, has expired or was taken. */
class LockExtendError extends LockError {}
/** A held lock was lost: its lease lapsed, or it was found gone or taken. */
class LockLostError extends LockError {
  constructor(message, options) {
    super(message, options)
    this.reason = options?.reason
  }

  /**
   * What `JSON.stringify` shows (an Error's own JSON has no message, and this one's token, a
   * bigint, would make it throw): what was lost, why, the token as a string, and the cause.
   */
  toJSON() {
    const { cause } = errorJSON(this)
    return { name: this.name, code: this.code, message: this.message, reason: this.reason, key: this.key, fencingToken: tokenJSON(this.fencingToken), ...(cause === undefined ? {} : { cause }) }
  }
}
/** The store failed or could not be reached; `cause` says why. */
class LockBackendError extends LockError {}
/** The client was closed. */
class LockClosedError extends LockError {}
/** The caller's AbortSignal fired (only when the signal carried no reason of its own). */
class LockAbortedError extends LockError {}
/** `assertLocked()` found no job lock held (outside a job, or its lock was lost; `cause` says how). */
class LockNotHeldError extends LockError {}

defineCode(LockAcquisitionError, 'ERR_LOCK_ACQUISITION')
defineCode(LockReleaseError, 'ERR_LOCK_RELEASE')
defineCode(LockExtendError, 'ERR_LOCK_EXTEND')
defineCode(LockLostError, 'ERR_LOCK_LOST')
defineCode(LockBackendError, 'ERR_LOCK_BACKEND')
defineCode(LockClosedError, 'ERR_LOCK_CLOSED')
defineCode(LockAbortedError, 'ERR_LOCK_ABORTED')
defineCode(LockNotHeldError, 'ERR_LOCK_NOT_HELD')

/** toJSON of a store failure's cause (a plain Error with a code). */
function causeToJSON() {
  return errorJSON(this)
}

/**
 * Builds the error for a `[code, message]` record coming from the native layer; `secrets`
 * (a password, …) are scrubbed from the message whatever the driver put in it.
 */
function fromNative([code, causeCode, raw], secrets) {
  const message = scrub(raw, secrets)
  switch (code) {
    case 'ERR_LOCK_BACKEND': {
      // The cause says what kind of failure it was, as data: ERR_LOCK_STORE_UNREACHABLE,
      // _TIMEOUT, _CLOSED, _SERVER, _AUTH, _NO_DATABASE, _UNSUPPORTED, _PROTOCOL, _INVALID or
      // _INTERNAL (and _REPLACED, _WRONG_TYPE).
      const cause = new Error(message)
      cause.code = causeCode || 'ERR_LOCK_STORE_INTERNAL'
      Object.defineProperty(cause, 'toJSON', { value: causeToJSON, writable: true, configurable: true })
      return new LockBackendError(`The lock store failed: ${message}`, { cause })
    }
    case 'ERR_LOCK_CLOSED':
      return new LockClosedError(message)
    case 'ERR_LOCK_ABORTED':
      return new LockAbortedError(message)
    default: {
      const err = new TypeError(message)
      err.code = code
      return err
    }
  }
}

module.exports = {
  LockError,
  LockAcquisitionError,
  LockReleaseError,
  LockExtendError,
  LockLostError,
  LockBackendError,
  LockClosedError,
  LockAbortedError,
  LockNotHeldError,
  fromNative,
  errorJSON,
}
