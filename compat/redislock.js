'use strict'
// The redislock 1.3 face: createLock, setDefaults, getAcquiredLocks, the three error classes,
// and Lock objects with acquire/release/extend taking a callback or returning a promise.
// Wire compatible: redislock and deadbolt processes exclude each other on one key during a
// migration. In every mode the value is the bare `_id`, byte for byte redislock's, so a process
// reading the key finds the lock's id (release and extend compare it, then DEL/PEXPIRE). By
// default the lock draws no fencing token, as redislock has none, and an uncontended acquisition
// is redislock's own command, one top-level SET key id PX timeout NX. With `fencing: true`
// (deadbolt's own option) each acquisition draws a token in a script call; the value stays the
// bare `_id`. redislock's own specs run against this face (__test__/redislock.spec.test.js).

const { randomUUID } = require('crypto')
const { LockClient } = require('../lib/client')
const { parseTarget } = require('../lib/topology')
const { toRedisTarget } = require('./redis-url')
const { tlsFingerprint } = require('../lib/tls')
const { compat } = require('./compat-promise')
const { LockAcquisitionError, LockReleaseError, LockExtendError } = require('../lib/errors')
const v = require('../lib/validate')
const { IdMap } = require('../lib/id-map')
const { tokenJSON } = require('../lib/json')

// fencing: deadbolt's own, off unless asked for (redislock has no tokens; see the top).
const defaults = { timeout: 10000, retries: 0, delay: 50, fencing: false }
// Keyed by each lock's sequence number, not a Set of locks: see lib/id-map.js.
const acquiredLocks = new IdMap()
let lockSeq = 0
/**
 * One LockClient per server and TLS material, shared by every lock that targets it (this face
 * is built on the modern client, with redislock's owner and attempt semantics). Keyed by a
 * salted digest of the material, so two clients trusting different CAs never share one.
 */
const clients = new Map()

function clientFor({ url, tls }) {
  // A cluster client's target is { cluster: [urls] }.
  const where = typeof url === 'string' ? url : JSON.stringify(url)
  const id = tls === undefined ? where : `${where}\0${tlsFingerprint(tls)}`
  let client = clients.get(id)
  if (client === undefined) {
    client = new LockClient(parseTarget(url), tls === undefined ? {} : { tls })
    clients.set(id, client)
  }
  return client
}

/**
 * timeout and delay are ms (at most MAX_MS); retries is a count, -1 for "forever"; fencing
 * (deadbolt's) a boolean.
 */
function checkOptions(lock) {
  v.checkInt(lock.timeout, 'timeout')
  if (typeof lock.retries !== 'number') throw v.typeError('retries', 'of type number', lock.retries)
  if (!Number.isSafeInteger(lock.retries) || lock.retries < -1) {
    throw v.rangeError('retries', `an integer >= -1 (-1 retries forever) and <= ${Number.MAX_SAFE_INTEGER}`, lock.retries)
  }
  v.checkInt(lock.delay, 'delay', 0)
  v.checkBoolean(lock.fencing, 'fencing')
}

/**
 * redislock ignored a falsy options argument; anything else must be a plain object (or a
 * function, whose properties redislock read): an Array, Date, Map… would be taken as `{}`.
 */
function checkOptionsArg(options) {
  if (options && typeof options !== 'function' && !v.isPlainObject(options)) {
    throw v.typeError('options', 'a plain object', options)
  }
  return options || null
}

function settle(promise, fn) {
  const p = compat(promise)
  return typeof fn === 'function' ? p.nodeify(fn) : p
}

class Lock {
  /**
   * @param {unknown} client node_redis v3, node-redis v4/v5, ioredis, an ioredis Cluster, a
   *   node-redis cluster, a URL or options
   * @param {{timeout?: number, retries?: number, delay?: number, fencing?: boolean}} [options]
   */
  constructor(client, options) {
    const target = toRedisTarget(client)
    this._id = randomUUID()
    this._seq = ++lockSeq
    this._locked = false
    this._key = null
    /** Fencing token of the current acquisition (a bigint), or null (always, unless `fencing`). */
    this.fencingToken = null
    Object.defineProperty(this, '_client', { value: clientFor(target), enumerable: false })
    // The modern lock of the current acquisition, or null.
    Object.defineProperty(this, '_held', { value: null, enumerable: false, writable: true })
    for (const key of Object.keys(defaults)) this[key] = defaults[key]
    options = checkOptionsArg(options)
    if (options !== null) {
      // Own properties only (not what someone put on Object.prototype); undefined or null
      // keeps the default, as redislock's parseInt(...) || 0 kept a usable value.
      for (const key of Object.keys(defaults)) {
        const value = v.own(options, key)
        if (value !== undefined && value !== null) this[key] = value
      }
    }
    checkOptions(this)
  }

  _reset() {
    this._locked = false
    this._key = null
    this._held = null
    this.fencingToken = null
    acquiredLocks.delete(this._seq)
  }

  /** Acquires `key`, retrying `retries` times (`-1`: forever) `delay` ms apart. */
  acquire(key, fn) {
    return settle(this._acquire(key), fn)
  }

  async _acquire(key) {
    v.checkKey(key)
    checkOptions(this)
    if (this._locked) throw new LockAcquisitionError('Lock already held')
    let lock
    try {
      lock = await this._client._claim(key, this._id, {
        ttl: this.timeout,
        maxAttempts: this.retries === -1 ? -1 : this.retries + 1,
        retryDelay: this.delay,
        // The bare `_id`, redislock's own value, with or without a token (see the top).
        plain: true,
        fencing: this.fencing,
        // The lease ran out without a release: the lock leaves getAcquiredLocks(), and
        // release() then rejects "had expired".
        onLost: () => acquiredLocks.delete(this._seq),
      })
    } catch (err) {
      throw new LockAcquisitionError(err.cause?.message ?? err.message, { cause: err })
    }
    if (lock === null) throw new LockAcquisitionError(`Could not acquire lock on "${key}"`)
    this._locked = true
    this._key = key
    this._held = lock
    this.fencingToken = lock.fencingToken
    acquiredLocks.set(this._seq, this)
  }

  /** Releases the lock; rejects if it was not held or had expired (the state resets). */
  release(fn) {
    return settle(this._release(), fn)
  }

  async _release() {
    if (!this._locked) throw new LockReleaseError('Lock has not been acquired')
    const key = this._key
    let released
    try {
      released = await this._held.release()
    } catch (err) {
      throw new LockReleaseError(err.cause?.message ?? err.message, { cause: err })
    }
    this._reset()
    if (!released) throw new LockReleaseError(`Lock on "${key}" had expired`)
  }

  /** Sets the remaining lease to `time` ms (default: `timeout`). */
  extend(time, fn) {
    if (typeof time === 'function' && fn === undefined) {
      fn = time
      time = undefined
    }
    return settle(this._extend(time), fn)
  }

  async _extend(time) {
    const ms = time === undefined || time === null ? this.timeout : time
    v.checkInt(ms, 'time')
    if (!this._locked) throw new LockExtendError('Lock has not been acquired')
    const key = this._key
    try {
      await this._held.extend(ms)
    } catch (err) {
      if (err.code === 'ERR_LOCK_EXTEND') {
        // Not held any more (expired or taken): redislock's message, and the state resets.
        this._reset()
        throw new LockExtendError(`Lock on "${key}" had expired`)
      }
      throw new LockExtendError(err.cause?.message ?? err.message, { cause: err })
    }
  }

  /**
   * What `JSON.stringify` shows: the fields of redislock's own lock, in its order, without its
   * client handles (redislock's JSON carried its node_redis client and script cache), then
   * deadbolt's `fencing` and the token as a string (a bigint would make JSON.stringify throw).
   */
  toJSON() {
    return {
      _id: this._id,
      _locked: this._locked,
      _key: this._key,
      timeout: this.timeout,
      retries: this.retries,
      delay: this.delay,
      fencing: this.fencing,
      fencingToken: tokenJSON(this.fencingToken),
    }
  }
}

/** Returns a new lock for `client`, with `options` over the current defaults. */
function createLock(client, options) {
  return new Lock(client, options)
}

/** Sets the defaults used by locks created afterwards (timeout, retries, delay, fencing). */
function setDefaults(options) {
  options = checkOptionsArg(options)
  if (options === null) return
  const next = { ...defaults }
  for (const key of Object.keys(defaults)) {
    const raw = v.own(options, key)
    if (raw === null || raw === undefined) continue
    // deadbolt's own option takes a boolean as it is (checkOptions refuses anything else).
    if (key === 'fencing') {
      next.fencing = raw
      continue
    }
    // redislock parsed each value with parseInt, so '100' and 100.7 still mean 100. A number
    // whose decimal form parseInt misreads (1e21 → 1, 5e-7 → 5, Infinity) is refused instead.
    if (typeof raw !== 'number' && typeof raw !== 'string') throw v.typeError(key, 'of type number or string', raw)
    const value = parseInt(raw, 10)
    if (Number.isNaN(value) || (typeof raw === 'number' && value !== Math.trunc(raw))) {
      throw v.rangeError(key, 'an integer', raw)
    }
    next[key] = value
  }
  // All or nothing, and refused here rather than at the next createLock.
  checkOptions(next)
  Object.assign(defaults, next)
}

/** The locks this process currently holds through this face. */
function getAcquiredLocks() {
  return acquiredLocks.values()
}

module.exports = {
  createLock,
  setDefaults,
  getAcquiredLocks,
  Lock,
  LockAcquisitionError,
  LockReleaseError,
  LockExtendError,
}
