'use strict'
// The sql-lock 0.1.3 face: initialize, getLock, transaction (sql-lock's three exports), plus
// close and DLMError. A user changes `require('sql-lock')` to `require('deadbolt')`.
//
// What stays as in sql-lock: the signatures, the defaults (locking_ttl 10 000 ms), getLock
// resolving a releaser once the lock is held and waiting as long as it takes, transaction
// releasing after fn, DLMError with `err_type` / `err_message` and sql-lock's error texts.
// What changes underneath: the lock is a lease row (deadbolt_locks) whose expiry the server
// decides, not an open transaction ended by a JS timer, so a held lock pins no connection, a
// stalled event loop cannot keep it past its ttl, and nothing keeps the process alive.
// docs/sql-lock.md lists every difference.

const { connect, checkConnectOptions } = require('../lib/client')
const { LockClosedError, errorJSON } = require('../lib/errors')
const v = require('../lib/validate')
const { tokenJSON } = require('../lib/json')
const registry = require('../lib/registry')

/** The MySQL store's entry in the registry: which schemes a URI may have. */
const MYSQL = registry.byName('mysql')

/** sql-lock's `DLMErrorTypes`, typo included (`INVALID_PARAMTERS`), plus the right spelling. */
const DLMErrorTypes = Object.freeze({
  INVALID_PARAMTERS: 'invalid_parameters',
  INVALID_PARAMETERS: 'invalid_parameters',
  NOT_INITIALIZED: 'not_initialized',
  INITIALIZATION_FAILED: 'initialization_failed',
})

const CODES = Object.freeze({
  not_initialized: 'ERR_LOCK_NOT_INITIALIZED',
  initialization_failed: 'ERR_LOCK_INITIALIZATION_FAILED',
  invalid_parameters: 'ERR_INVALID_ARG_VALUE',
})

// sql-lock's texts for its own cases, kept so that code comparing `err_message` still works.
const INVALID_KEY = 'Invalid Key'
const URI_MISSING = 'Mysql URI Missing'
const NOT_INITIALIZED = 'configuration not set'
// Texts for the cases sql-lock did not check.
const INVALID_URI = 'Invalid Mysql URI'
const INVALID_TTL = 'Invalid TTL'
const INVALID_OPTIONS = 'Invalid Options'
const INVALID_FUNCTION = 'Invalid Function'
const INITIALIZATION_FAILED = 'initialization failed'

const kDLM = Symbol.for('deadbolt.DLMError')

/** toJSON of the DLM errors: name, code, message, err_type, err_message and the cause. */
function dlmToJSON() {
  return errorJSON(this)
}

/** Marks `proto` as a DLM error's (for `instanceof DLMError`) and gives it its toJSON. */
function brand(proto) {
  Object.defineProperty(proto, kDLM, { value: true })
  Object.defineProperty(proto, 'toJSON', { value: dlmToJSON, writable: true, configurable: true })
}

function setFields(err, errType, errMessage, code) {
  err.err_message = errMessage
  err.err_type = errType
  err.code = code
}

/**
 * sql-lock's error: `err_type` ('invalid_parameters' | 'not_initialized' |
 * 'initialization_failed'), `err_message` (sql-lock's text) and a stable `code`.
 * `new DLMError({ err_type, err_message })` works as in sql-lock.
 *
 * Bad input is reported with a TypeError or RangeError (Node's ERR_INVALID_ARG_TYPE,
 * ERR_INVALID_ARG_VALUE or ERR_OUT_OF_RANGE) that also passes `instanceof DLMError` and
 * carries `err_type: 'invalid_parameters'`.
 */
class DLMError extends Error {
  constructor(error, options) {
    const errMessage = error?.err_message
    super(options?.message ?? errMessage, options?.cause === undefined ? undefined : { cause: options.cause })
    Object.defineProperty(this, 'name', { value: 'DLMError', enumerable: false, writable: true, configurable: true })
    setFields(this, error?.err_type, errMessage, error?.code ?? CODES[error?.err_type] ?? 'ERR_LOCK_DLM')
  }

  static [Symbol.hasInstance](value) {
    // The bad-input errors are TypeErrors/RangeErrors and DLMErrors at once.
    if (this === DLMError && value !== null && typeof value === 'object' && value[kDLM] === true) return true
    return Function.prototype[Symbol.hasInstance].call(this, value)
  }
}
brand(DLMError.prototype)

class DLMTypeError extends TypeError {}
class DLMRangeError extends RangeError {}
brand(DLMTypeError.prototype)
brand(DLMRangeError.prototype)

/** Turns a TypeError/RangeError from the argument checks into an invalid_parameters error. */
function invalid(errMessage, err) {
  const Class = err instanceof RangeError ? DLMRangeError : DLMTypeError
  const out = new Class(`${errMessage}: ${err.message}`)
  const nodeCode = err.code === 'ERR_INVALID_ARG_TYPE' || err.code === 'ERR_INVALID_ARG_VALUE' || err.code === 'ERR_OUT_OF_RANGE'
  setFields(out, DLMErrorTypes.INVALID_PARAMETERS, errMessage, nodeCode ? err.code : CODES.invalid_parameters)
  return out
}

function check(errMessage, fn) {
  try {
    return fn()
  } catch (err) {
    throw invalid(errMessage, err)
  }
}

function notInitialized(cause) {
  return new DLMError(
    { err_type: DLMErrorTypes.NOT_INITIALIZED, err_message: NOT_INITIALIZED },
    { message: `${NOT_INITIALIZED}: call initialize(mysqlUri) first`, cause },
  )
}

function checkTtl(ttl, name) {
  return check(INVALID_TTL, () => v.checkInt(ttl, name))
}

function checkKey(key) {
  return check(INVALID_KEY, () => v.checkKey(key))
}

// ───────────── state ─────────────
// `current` is the configuration getLock uses: { client, ttl, retired, waiting }. A second
// initialize replaces it; the previous client keeps serving the locks taken and the getLocks
// still waiting through it, and closes once none is left (or at close()).

let current = null
/** The initialize in progress, if any: getLock waits for it rather than failing. */
let initializing = null
let generation = 0
const retired = new Set()

/** Whether a configuration still has locks held or getLocks waiting through it. */
function busy(entry) {
  return entry.waiting > 0 || entry.client.heldCount > 0
}

function retire(entry) {
  entry.retired = true
  if (busy(entry)) retired.add(entry)
  else entry.client.close().catch(() => {})
}

/** Closes a replaced configuration's client once nothing uses it any more. */
function settleRetired(entry) {
  if (entry.retired && retired.has(entry) && !busy(entry)) {
    retired.delete(entry)
    entry.client.close().catch(() => {})
  }
}

/**
 * Connects to MySQL/MariaDB (`mysql://` or `mariadb://`), creating the lock table if needed,
 * and makes `locking_ttl` (default 10 000 ms) the default ttl of getLock. Rejects with a
 * DLMError: 'invalid_parameters' for a missing or malformed URI or options,
 * 'initialization_failed' when the server cannot be reached or refuses (`cause` says why).
 * Besides locking_ttl it accepts deadbolt's `poolSize`, `table`, `connectTimeout` and
 * `retryDelay` (how often a waiting getLock asks the server, default 50 ms).
 */
async function initialize(mysqlUri, options) {
  if (mysqlUri === undefined || mysqlUri === null || mysqlUri === '') {
    throw invalid(URI_MISSING, mysqlUri === '' ? v.valueError('mysqlUri', 'must not be empty', mysqlUri) : v.typeError('mysqlUri', 'of type string', mysqlUri))
  }
  if (typeof mysqlUri !== 'string') throw invalid(INVALID_URI, v.typeError('mysqlUri', 'of type string', mysqlUri))
  // The URI is never echoed: it may carry a password.
  if (registry.byScheme(registry.schemeOf(mysqlUri)) !== MYSQL || mysqlUri.length === mysqlUri.indexOf('://') + 3) {
    const err = new TypeError(`The argument 'mysqlUri' must be a ${registry.listed(MYSQL.schemes)} URI`)
    err.code = 'ERR_INVALID_ARG_VALUE'
    throw invalid(INVALID_URI, err)
  }
  if (options === undefined || options === null) options = {}
  check(INVALID_OPTIONS, () => v.checkObject(options, 'options'))
  // Own properties only: nothing inherited from Object.prototype.
  const ttl = v.own(options, 'locking_ttl') ?? 10_000
  checkTtl(ttl, 'options.locking_ttl')
  const poolSize = v.own(options, 'poolSize')
  const table = v.own(options, 'table')
  const connectTimeout = v.own(options, 'connectTimeout')
  const retryDelay = v.own(options, 'retryDelay')

  const connectOptions = { ttl, poolSize, table, connectTimeout, retryDelay }
  // The options are checked here, so what connect() refuses before any I/O is the URI.
  check(INVALID_OPTIONS, () => checkConnectOptions(connectOptions))

  const mine = ++generation
  let client
  const attempt = (async () => {
    try {
      client = await connect(mysqlUri, connectOptions)
    } catch (err) {
      if (err instanceof TypeError || err instanceof RangeError) throw invalid(INVALID_URI, err)
      throw new DLMError(
        { err_type: DLMErrorTypes.INITIALIZATION_FAILED, err_message: INITIALIZATION_FAILED },
        { message: `${INITIALIZATION_FAILED}: ${err.cause?.message ?? err.message}`, cause: err },
      )
    }
    if (mine !== generation) {
      // close() or a later initialize ran meanwhile: this configuration never takes effect.
      await client.close().catch(() => {})
      throw new DLMError(
        { err_type: DLMErrorTypes.INITIALIZATION_FAILED, err_message: INITIALIZATION_FAILED },
        { message: `${INITIALIZATION_FAILED}: superseded by close() or a later initialize()` },
      )
    }
    if (current !== null) retire(current)
    current = { client, ttl, retired: false, waiting: 0 }
  })()
  initializing = attempt
  try {
    await attempt
  } finally {
    if (initializing === attempt) initializing = null
  }
}

/** toJSON of a releaser: its token, as a string (JSON has no bigint). */
function releaserToJSON() {
  return { fencingToken: tokenJSON(this.fencingToken) }
}

/**
 * Takes the lock `key` for `ttl` ms (default: initialize's locking_ttl), waiting as long as
 * it takes for the holder to release it or for its lease to run out. Resolves a releaser:
 * an idempotent function returning a promise that resolves once the lock is released (also
 * when its lease had already run out). `releaser.fencingToken` is the acquisition's fencing
 * token (a bigint).
 */
async function getLock(key, ttl) {
  checkKey(key)
  if (ttl !== undefined && ttl !== null) checkTtl(ttl, 'ttl')
  if (initializing !== null) await initializing.catch(() => {})
  const entry = current
  if (entry === null) throw notInitialized()
  let lock
  entry.waiting++
  try {
    // A lease running out is how sql-lock's locks end ("released when the lock times out"),
    // not an incident: no loss warning.
    lock = await entry.client.acquire(key, { ttl: ttl ?? entry.ttl, wait: Infinity, onLost: ignoreLoss })
  } catch (err) {
    // close() cancels the waits in progress: say so, rather than "aborted".
    if (err.code === 'ERR_LOCK_ABORTED' && entry.client._closed) {
      throw new LockClosedError('close() was called while getLock waited', { cause: err })
    }
    throw err
  } finally {
    entry.waiting--
    settleRetired(entry)
  }
  let releasing = null
  const releaser = () => {
    if (releasing === null) {
      releasing = lock.release().then(() => { settleRetired(entry) })
    }
    return releasing
  }
  releaser.fencingToken = lock.fencingToken
  // JSON.stringify skips a bare function; a releaser shows its token, as a string.
  Object.defineProperty(releaser, 'toJSON', { value: releaserToJSON, writable: true, configurable: true })
  return releaser
}

/**
 * Runs `fn()` holding `key` (with initialize's locking_ttl, as sql-lock did) and releases the
 * lock afterwards, also when fn throws. Resolves with fn's result or rejects with fn's error.
 * A release that fails (the store unreachable) does not replace fn's outcome: the lease runs
 * out by itself, and the failure is reported as a process warning.
 */
async function transaction(key, fn) {
  checkKey(key)
  if (typeof fn !== 'function') throw invalid(INVALID_FUNCTION, v.typeError('func', 'of type function', fn))
  const release = await getLock(key)
  let result
  try {
    result = await fn()
  } catch (err) {
    await release().catch(warnRelease)
    throw err
  }
  await release().catch(warnRelease)
  return result
}

function ignoreLoss() {}

function warnRelease(err) {
  process.emitWarning(`deadbolt (sql-lock face): releasing after transaction() failed; the lock stays until its ttl runs out: ${err.message}`, { code: err.code, type: 'DeadboltWarning' })
}

/**
 * Releases every lock taken through this face and closes its connections. Idempotent.
 * Afterwards getLock rejects with 'not_initialized' until initialize is called again.
 * (sql-lock had no close: its pool kept the process alive.)
 */
async function close() {
  generation++
  initializing = null
  const entries = [...retired]
  if (current !== null) entries.push(current)
  current = null
  retired.clear()
  await Promise.all(entries.map((e) => e.client.close()))
}

module.exports = {
  initialize,
  getLock,
  transaction,
  close,
  DLMError,
  DLMErrorTypes,
}
