'use strict'
// The redis-semaphore 5.8 face: Mutex, Semaphore, MultiSemaphore and their Redlock variants
// over several independent servers, with the original's options, methods, messages and wire
// format (compat/redis-semaphore-redis.js), so that a fleet mixing the original and the face
// excludes each other on the same keys. It drives the caller's own client, as the original
// does (see docs/redis-semaphore.md for why not the native engine).
//
// Where the original loses a lock without saying so, or says so by crashing, the face differs
// (each has a test in __test__/redis-semaphore.test.js):
// - release and refresh never race (#205): release() waits for a refresh in flight, and a
//   refresh that completes after release() began is ignored, so it neither reports a loss
//   nor leaves a key behind (a Redlock refresh re-takes the lock on servers that lost it);
// - a lock whose refreshes fail (Redis unreachable) for a whole lockTimeout, or get no answer
//   by a lockTimeout after the lease's end, is reported lost through onLockLost (#175's
//   intent: never hold a lock that may have expired without saying so); the original threw
//   each failure as an unhandled rejection, and one refresh without an answer stopped every
//   later refresh without a word;
// - the default onLockLost does not throw into an unhandled rejection (which ends the
//   process): it emits the LostLockError as a process warning (loud, not a crash);
// - a Redlock multi-semaphore whose acquisition misses the quorum removes all of its permits
//   from the servers that granted them (the original removed only `<identifier>`, a member
//   it never adds, leaving the permits taken until they expire).

const { randomUUID } = require('crypto')
const { LockLostError, LockAcquisitionError } = require('../lib/errors')
const { ops, isClient } = require('./redis-semaphore-redis')
const { Waiting } = require('./redlock-wire')

/** A lock was found lost by a refresh (passed to onLockLost). */
class LostLockError extends LockLostError {}
/** acquire() ran out of acquireTimeout or acquireAttemptsLimit. */
class TimeoutError extends LockAcquisitionError {}

/** The original's defaults (refreshInterval: 0.8 × lockTimeout). */
const defaultTimeoutOptions = {
  lockTimeout: 10000,
  acquireTimeout: 10000,
  acquireAttemptsLimit: Number.POSITIVE_INFINITY,
  retryInterval: 10,
}

const REFRESH_SHARE = 0.8

/**
 * The default onLockLost: the loss is emitted as a process warning (printed on stderr, seen by
 * `process.on('warning')`). The original threw it from a timer, an unhandled rejection that
 * ends the process.
 */
function defaultOnLockLost(err) {
  process.emitWarning(err)
}

function typeError(message) {
  const err = new TypeError(message)
  err.code = 'ERR_INVALID_ARG_TYPE'
  return err
}

function valueError(message) {
  const err = new TypeError(message)
  err.code = 'ERR_INVALID_ARG_VALUE'
  return err
}

function rangeError(message) {
  const err = new RangeError(message)
  err.code = 'ERR_OUT_OF_RANGE'
  return err
}

/** A number of ms (or a count) in [min, max]; Infinity only where `infinite`. */
function checkNumber(value, name, min, infinite = false) {
  if (typeof value !== 'number') throw typeError(`"${name}" must be a number`)
  if (Number.isNaN(value) || value < min || (!infinite && !Number.isFinite(value))) {
    throw rangeError(`"${name}" must be ${infinite ? 'a number' : 'a finite number'} >= ${min}, got ${value}`)
  }
}

function checkKey(key) {
  if (!key) throw valueError('"key" is required')
  if (typeof key !== 'string') throw typeError('"key" must be a string')
}

/** `limit` or `permits`: a positive integer (the original took any truthy number). */
function checkCount(value, name) {
  if (!value) throw valueError(`"${name}" is required`)
  if (typeof value !== 'number') throw typeError(`"${name}" must be a number`)
  if (!Number.isSafeInteger(value) || value < 1) throw rangeError(`"${name}" must be a positive integer, got ${value}`)
}

/** How many of `n` servers make a Redlock quorum (the original's: a majority, rounded up). */
function quorum(n) {
  return Math.round((n + 1) / 2)
}

/**
 * Acquisitions pausing between attempts, by the client they go through (the first one for
 * the Redlock variants) and key: a release through this process wakes the oldest, which asks
 * again at once instead of after its retryInterval. Only the time of an attempt moves (it
 * counts against acquireAttemptsLimit as any attempt), so processes running redis-semaphore
 * see the same commands; waiters in other processes still poll.
 */
const waitingRooms = new WeakMap()

function waitingRoom(lock) {
  const client = lock._client ?? lock._clients[0]
  let room = waitingRooms.get(client)
  if (room === undefined) waitingRooms.set(client, (room = new Waiting()))
  return room
}

/** `fn(client)` on every client, a failure counting as false: the booleans. */
function onAll(clients, fn) {
  return Promise.all(clients.map((client) => fn(client).catch(() => false)))
}

/**
 * The base of every lock: options, identifier, the acquire loop, the refresh timer and the
 * release. Subclasses define `_kind`, `_key` and `_acquireOnce(now)`, `_refresh()`, `_undo()`
 * (after a failed attempt) and `_release()`.
 */
class Lock {
  /**
   * @param {object} [options] lockTimeout, acquireTimeout, acquireAttemptsLimit, retryInterval,
   *   refreshInterval, onLockLost, identifier, acquiredExternally (and the deprecated
   *   externallyAcquiredIdentifier, identifierSuffix)
   */
  constructor(options = defaultTimeoutOptions) {
    if (options === null || typeof options !== 'object') throw typeError('"options" must be an object')
    const {
      lockTimeout = defaultTimeoutOptions.lockTimeout,
      acquireTimeout = defaultTimeoutOptions.acquireTimeout,
      acquireAttemptsLimit = defaultTimeoutOptions.acquireAttemptsLimit,
      retryInterval = defaultTimeoutOptions.retryInterval,
      refreshInterval = Math.round(lockTimeout * REFRESH_SHARE),
      onLockLost = defaultOnLockLost,
      externallyAcquiredIdentifier,
      identifierSuffix,
      identifier,
      acquiredExternally,
    } = options
    checkNumber(lockTimeout, 'lockTimeout', 1)
    checkNumber(acquireTimeout, 'acquireTimeout', 0, true)
    checkNumber(acquireAttemptsLimit, 'acquireAttemptsLimit', 0, true)
    checkNumber(retryInterval, 'retryInterval', 0)
    checkNumber(refreshInterval, 'refreshInterval', 0)
    if (typeof onLockLost !== 'function') throw typeError('"onLockLost" must be a function')
    if (identifier !== undefined && (!identifier || typeof identifier !== 'string')) {
      throw valueError('identifier must be not empty random string')
    }
    if (acquiredExternally && !identifier) {
      throw valueError('acquiredExternally=true meanless without custom identifier')
    }
    if (externallyAcquiredIdentifier && (identifier || acquiredExternally)) {
      throw valueError('Invalid usage. Use custom identifier and acquiredExternally: true')
    }
    this._identifier = identifier || externallyAcquiredIdentifier || newIdentifier(identifierSuffix)
    this._acquiredExternally = !!acquiredExternally || !!externallyAcquiredIdentifier
    this._acquireOptions = { lockTimeout, acquireTimeout, acquireAttemptsLimit, retryInterval, identifier: this._identifier }
    this._refreshTimeInterval = refreshInterval
    this._onLockLost = onLockLost
    this._acquired = false
    // The refresh in flight (a promise), or null.
    this._refreshing = null
    this._refreshInterval = undefined
    // Bumped by every acquisition and release: a refresh started under another value is stale.
    this._generation = 0
    // When the last successful acquire or refresh attempt started (Date.now()).
    this._confirmedAt = 0
    this._attemptAt = 0
    this._processRefresh = () => this._refreshOnce()
  }

  /** The lock's identifier: the value (or member) it stores. */
  get identifier() {
    return this._identifier
  }

  /** Whether this instance holds the lock (false once released or found lost). */
  get isAcquired() {
    return this._acquired
  }

  /**
   * deadbolt's own: the time (epoch ms) until which the lock is surely held, the start of the
   * last confirmed acquire or refresh plus lockTimeout; null when not held.
   */
  get validUntil() {
    return this._acquired ? this._confirmedAt + this._acquireOptions.lockTimeout : null
  }

  /** Acquires the lock or rejects with TimeoutError (or the signal's reason when aborted). */
  async acquire(abortSignal) {
    if (!(await this.tryAcquire(abortSignal))) {
      throw new TimeoutError(`Acquire ${this._kind} ${this._key} timeout`)
    }
  }

  /**
   * Acquires the lock: false once acquireTimeout or acquireAttemptsLimit runs out. With
   * acquiredExternally, confirms the lock already taken under the identifier (one refresh).
   * Cancel safety: an abort between attempts rejects with the signal's reason and leaves
   * nothing taken (a failed Redlock attempt is undone first).
   */
  async tryAcquire(abortSignal) {
    this._attemptAt = Date.now()
    let acquired
    if (this._acquiredExternally) {
      acquired = await this._refresh()
    } else {
      acquired = await this._acquire(abortSignal)
    }
    if (!acquired) return false
    this._acquired = true
    this._acquiredExternally = false
    this._generation++
    this._confirmedAt = this._attemptAt
    if (this._refreshTimeInterval > 0) this._startRefresh()
    return true
  }

  /** The acquire loop of the original: attempts retryInterval ms apart until a limit. */
  async _acquire(abortSignal) {
    const { acquireTimeout, acquireAttemptsLimit, retryInterval } = this._acquireOptions
    const end = Date.now() + acquireTimeout
    let attempt = 0
    let now
    while ((now = Date.now()) < end && ++attempt <= acquireAttemptsLimit) {
      abortSignal?.throwIfAborted()
      this._attemptAt = now
      if (await this._acquireOnce(now)) return true
      await this._undo()
      await waitingRoom(this).pause([this._key], retryInterval, abortSignal)
    }
    return false
  }

  /** Nothing to undo after a failed single-server attempt. */
  async _undo() {}

  _startRefresh() {
    this.stopRefresh()
    this._refreshInterval = setInterval(this._processRefresh, this._refreshTimeInterval)
    this._refreshInterval.unref()
  }

  /** Stops refreshing: the lock then expires lockTimeout after its last refresh. */
  stopRefresh() {
    if (this._refreshInterval !== undefined) {
      clearInterval(this._refreshInterval)
      this._refreshInterval = undefined
    }
  }

  /**
   * One refresh, skipped while another is in flight. The lock is lost when the refresh says
   * so, and also when no refresh has confirmed it for a whole lockTimeout (Redis unreachable,
   * failing or not answering): by then it has expired on the server.
   */
  async _refreshOnce() {
    if (this._refreshing) return
    const generation = this._generation
    const started = Date.now()
    let done
    this._refreshing = new Promise((resolve) => { done = resolve })
    let timer
    try {
      // A refresh that answers "still ours" late proves the lock never expired (the server
      // compares the value before extending it), so it is given until a whole lockTimeout
      // after the lease's end (or after its own start, when that is later) to answer. A
      // server that never answers then no longer holds the lock anyone's belief up.
      const { lockTimeout } = this._acquireOptions
      const left = Math.max(0, this._confirmedAt + lockTimeout - started)
      const leaseEnd = new Promise((resolve) => {
        timer = setTimeout(resolve, left + lockTimeout, { expired: true })
      })
      const outcome = await Promise.race([
        this._refresh().then((refreshed) => ({ refreshed }), (cause) => ({ cause })),
        leaseEnd,
      ])
      // Released (or released and acquired again) while this refresh was in flight: its
      // answer is about a lock this instance gave up (#205).
      if (!this._acquired || generation !== this._generation) return
      let reason = 'not-owned'
      if (outcome.refreshed) {
        this._confirmedAt = started
        return
      }
      if (outcome.cause !== undefined) {
        // Failed (not refused): held as far as anyone can tell until the lease ends.
        if (Date.now() < this._confirmedAt + lockTimeout) return
        reason = 'expired'
      } else if (outcome.expired) {
        reason = 'expired'
      }
      this._acquired = false
      this._generation++
      this.stopRefresh()
      const options = outcome.cause === undefined ? { reason } : { reason, cause: outcome.cause }
      const err = new LostLockError(`Lost ${this._kind} for key ${this._key}`, options)
      err.key = this._key
      err.fencingToken = null
      this._onLockLost.call(this, err)
    } finally {
      clearTimeout(timer)
      this._refreshing = null
      done()
    }
  }

  /**
   * Releases the lock (and stops refreshing). Waits for a refresh in flight first, so that no
   * refresh lands after the release. Resolves whether or not the lock was still held.
   */
  async release() {
    this.stopRefresh()
    const held = this._acquired || this._acquiredExternally
    this._acquired = false
    this._acquiredExternally = false
    this._generation++
    if (this._refreshing) await this._refreshing
    if (!held) return
    const released = this._release()
    // The release's commands are written: a waiter woken now sends its attempt behind them, so
    // it gets the lock (or permit) in the release's round trip.
    waitingRoom(this).wake([this._key])
    await released
  }
}

function newIdentifier(suffix) {
  const uuid = randomUUID()
  return suffix ? `${uuid}-${suffix}` : uuid
}

/** A mutex on one Redis: `mutex:<key>` holds the identifier. */
class Mutex extends Lock {
  /**
   * @param {object} client an ioredis (or ioredis-mock) or node-redis 4/5 client or cluster
   * @param {string} key
   * @param {object} [options]
   */
  constructor(client, key, options) {
    super(options)
    this._kind = 'mutex'
    if (!client) throw typeError('"client" is required')
    checkKey(key)
    if (!isClient(client)) throw typeError('"client" must be an ioredis or node-redis client')
    this._client = client
    this._key = `mutex:${key}`
  }

  _acquireOnce() {
    return ops.mutexAcquire(this._client, this._key, this._identifier, this._acquireOptions.lockTimeout)
  }

  _refresh() {
    return ops.mutexRefresh(this._client, this._key, this._identifier, this._acquireOptions.lockTimeout)
  }

  async _release() {
    await ops.mutexRelease(this._client, this._key, this._identifier)
  }
}

/**
 * What a semaphore (on one Redis or over several) sets on the mutex it extends: `limit`
 * permits on the sorted set `semaphore:<key>`, one of them held as this lock's identifier.
 */
function asSemaphore(lock, kind, key, limit) {
  lock._kind = kind
  checkCount(limit, 'limit')
  lock._key = `semaphore:${key}`
  lock._limit = limit
  lock._members = [lock._identifier]
}

/** What a multi-semaphore sets on the semaphore it extends: `permits` members, taken together. */
function withPermits(lock, kind, permits) {
  lock._kind = kind
  checkCount(permits, 'permits')
  lock._permits = permits
  lock._members = Array.from({ length: permits }, (_, i) => `${lock._identifier}_${i}`)
}

/** A semaphore of `limit` permits on one Redis: the sorted set `semaphore:<key>`. */
class Semaphore extends Mutex {
  /**
   * @param {object} client
   * @param {string} key
   * @param {number} limit how many holders at once
   * @param {object} [options]
   */
  constructor(client, key, limit, options) {
    super(client, key, options)
    asSemaphore(this, 'semaphore', key, limit)
  }

  _acquireOnce(now) {
    return ops.semaphoreAcquire(this._client, this._key, this._members, this._limit, this._acquireOptions.lockTimeout, now)
  }

  _refresh() {
    return ops.semaphoreRefresh(this._client, this._key, this._members, this._limit, this._acquireOptions.lockTimeout, Date.now())
  }

  async _release() {
    await ops.semaphoreRelease(this._client, this._key, this._members)
  }
}

/** `permits` of a semaphore's `limit`, taken and given back together. */
class MultiSemaphore extends Semaphore {
  /**
   * @param {object} client
   * @param {string} key
   * @param {number} limit
   * @param {number} permits how many of the limit this lock takes
   * @param {object} [options]
   */
  constructor(client, key, limit, permits, options) {
    super(client, key, limit, options)
    withPermits(this, 'multi-semaphore', permits)
  }
}

/** A mutex over several independent servers, held on a majority of them. */
class RedlockMutex extends Lock {
  /**
   * @param {object[]} clients one client per server
   * @param {string} key
   * @param {object} [options]
   */
  constructor(clients, key, options = defaultTimeoutOptions) {
    super(options)
    this._kind = 'redlock-mutex'
    if (!clients || !Array.isArray(clients)) throw typeError('"clients" array is required')
    checkKey(key)
    if (clients.length === 0 || !clients.every(isClient)) throw typeError('"clients" must be ioredis or node-redis clients')
    this._clients = clients
    this._key = `mutex:${key}`
  }

  _take(client, now) {
    return ops.mutexAcquire(client, this._key, this._identifier, this._acquireOptions.lockTimeout, now)
  }

  _renew(client) {
    return ops.mutexRefresh(client, this._key, this._identifier, this._acquireOptions.lockTimeout)
  }

  _drop(client) {
    return ops.mutexRelease(client, this._key, this._identifier)
  }

  async _acquireOnce(now) {
    const granted = await onAll(this._clients, (client) => this._take(client, now))
    return granted.filter(Boolean).length >= quorum(this._clients.length)
  }

  async _undo() {
    await onAll(this._clients, (client) => this._drop(client))
  }

  /** Renews on every server; with a quorum, takes the lock again where it was missing. */
  async _refresh() {
    const generation = this._generation
    const now = Date.now()
    const renewed = await onAll(this._clients, (client) => this._renew(client, now))
    if (renewed.filter(Boolean).length < quorum(this._clients.length)) {
      await this._undo()
      return false
    }
    // The lock is held (a majority confirmed it): where it had expired, take it again, unless
    // it was released or found lost meanwhile (#205).
    if (generation !== this._generation) return true
    await onAll(this._clients.filter((_, i) => !renewed[i]), (client) => this._take(client, now))
    return true
  }

  async _release() {
    await onAll(this._clients, (client) => this._drop(client))
  }
}

/** A semaphore over several independent servers. */
class RedlockSemaphore extends RedlockMutex {
  /**
   * @param {object[]} clients
   * @param {string} key
   * @param {number} limit
   * @param {object} [options]
   */
  constructor(clients, key, limit, options) {
    super(clients, key, options)
    asSemaphore(this, 'redlock-semaphore', key, limit)
  }

  _take(client, now) {
    return ops.semaphoreAcquire(client, this._key, this._members, this._limit, this._acquireOptions.lockTimeout, now)
  }

  _renew(client, now) {
    return ops.semaphoreRefresh(client, this._key, this._members, this._limit, this._acquireOptions.lockTimeout, now)
  }

  _drop(client) {
    return ops.semaphoreRelease(client, this._key, this._members)
  }
}

/** `permits` of a semaphore over several independent servers. */
class RedlockMultiSemaphore extends RedlockSemaphore {
  /**
   * @param {object[]} clients
   * @param {string} key
   * @param {number} limit
   * @param {number} permits
   * @param {object} [options]
   */
  constructor(clients, key, limit, permits, options) {
    super(clients, key, limit, options)
    withPermits(this, 'redlock-multi-semaphore', permits)
  }
}

module.exports = {
  Lock,
  Mutex,
  Semaphore,
  MultiSemaphore,
  RedlockMutex,
  RedlockSemaphore,
  RedlockMultiSemaphore,
  LostLockError,
  TimeoutError,
  defaultTimeoutOptions,
}
