'use strict'
// The modern API's client: connect() → LockClient, which acquires (Lock, lock.js), inspects,
// runs elections (election.js) and closes. One implementation for every store.

const { inspect } = require('util')
const { Native, FLAGS } = require('./native')
const { debug } = require('./debug')
const { LockClosedError } = require('./errors')
const v = require('./validate')
const { normalizeTls } = require('./tls')
const { dynamoOptions } = require('./dynamodb')
const { RELEASED } = require('./lock')
const { PendingAcquire, abortReason } = require('./pending')
const { Election } = require('./election')
const { parseTarget } = require('./topology')
const { STORE_OPTIONS } = require('./registry')
const { acquireReentrant } = require('./reentrant')
const { acquireAll } = require('./multilock')
const { Semaphore, checkSemaphore } = require('./semaphore')
const { ReadWriteLock } = require('./rwlock')
const { DEFAULTS, ONCE, resolveAcquireOptions, stripUndefined } = require('./options')
const { withToJSON } = require('./json')
const { checkName, ownerPrefix, holderOf } = require('./identity')
const observe = require('./observe')
const { adoptLock } = require('./adopt')
const webLocks = require('./weblocks')
const jobs = require('./jobs')

const { own } = v
const { LIMITS } = v
/** The options `list` takes. */
const LIST_OPTIONS = new Set(['limit'])

/** The options `connect` takes: the client's own and every store's (lib/registry.js). */
const CONNECT_OPTIONS = new Set(['name', 'identity', 'ttl', 'retryDelay', 'jitter', 'connectTimeout', 'responseTimeout', 'lazy', ...STORE_OPTIONS])
const TABLE_NAME = new RegExp(`^[A-Za-z0-9_]{1,${LIMITS.maxTableNameBytes}}$`)

/** Decodes a native lock info into the public shape (its JSON: the token as a string). */
function toInfo(key, raw) {
  if (!raw) return null
  const token = BigInt(raw.fencingToken)
  return withToJSON({
    key,
    owner: raw.owner,
    // Host, pid and client name, read from the owner token (lib/identity.js), or null.
    holder: holderOf(raw.owner),
    // 0 means the store cannot tell (a lock taken in the redislock wire format).
    fencingToken: token === 0n ? null : token,
    remainingMs: Number(raw.remainingMs),
    data: v.decodeData(raw.data),
  })
}

/** A connection to one lock store. Create with `connect(url)`. */
class LockClient {
  /**
   * @internal `target`: connect()'s first argument as `parseTarget` (lib/topology.js) returned
   * it, read here and handed on, never parsed again.
   */
  constructor(target, options = {}) {
    // Own properties only (connect() has checked them; the drop-in faces pass their own).
    // `dynamodb`: the checked DynamoDB options (see lib/dynamodb.js), credentials included.
    const { name, identity, ttl, retryDelay, jitter, connectTimeout, responseTimeout, table, poolSize, tls, dynamodb, secrets } = stripUndefined(options)
    this._defaults = { ...DEFAULTS, ...stripUndefined({ ttl, retryDelay, jitter }) }
    // Shown by util.inspect with any password masked; the URL itself is not kept.
    this._where = target.where
    // The store's registry name, as the diagnostics channels report it (lib/observe.js).
    this._store = target.store
    this._resolvedDefaults = new Map()
    // Owner tokens: a random prefix per client, which also names the holder (host, pid,
    // `name`; lib/identity.js), and a counter (unique, and cheaper than a UUID per acquisition).
    this._ownerPrefix = ownerPrefix({ identity, name })
    this._owners = 0
    // The TLS material and credentials go to the native side and are kept nowhere here (nor
    // printed by util.inspect or JSON.stringify of the client).
    this._native_ = new Native(target, stripUndefined({ connectTimeout, responseTimeout, table, poolSize, tls, dynamodb }), secrets)
    // The native side makes each owner from this prefix and the acquisition's sequence number.
    this._native_.addon.setOwnerPrefix(this._ownerPrefix)
    this._closed = false
    // Reentrant locks by key (lib/reentrant.js).
    this._reentries = new Map()
    // Scheduled jobs, and the run record this client last wrote per job name (lib/jobs.js).
    this._jobs = new Set()
    this._jobRecords = new Map()
    this._stoppingJobs = null
  }

  /** The resolved options of a call that passed none (cached: they never change). */
  _defaultOptions(waitDefault) {
    let cached = this._resolvedDefaults.get(waitDefault)
    if (cached === undefined) {
      cached = resolveAcquireOptions(this._defaults, undefined, waitDefault)
      this._resolvedDefaults.set(waitDefault, cached)
    }
    return cached
  }

  _native() {
    if (this._closed) throw new LockClosedError('The lock client has been closed')
    return this._native_
  }

  _nativeOrNull() {
    return this._closed ? null : this._native_
  }

  /** Resolves when the store answers; rejects with a LockBackendError otherwise. */
  async ping() {
    const native = this._native()
    await native.request((req) => native.addon.ping(req))
  }

  /** `kind`: what the diagnostics channels call it ('lock', or 'election' for a campaign). */
  _acquire(key, options, waitDefault, raise, kind = 'lock') {
    let o
    let native
    try {
      v.checkKey(key)
      o = options === undefined ? this._defaultOptions(waitDefault) : resolveAcquireOptions(this._defaults, options, waitDefault)
      native = this._native()
      if (o.signal?.aborted) throw abortReason(o.signal)
    } catch (err) {
      return Promise.reject(err)
    }
    if (o.reentrant) return acquireReentrant(this, key, o, raise)
    return this._acquireResolved(native, key, o, raise, undefined, kind)
  }

  /**
   * One acquisition with resolved options `o` (see resolveAcquireOptions). `permit`:
   * { count, limit, kind } for permits of the semaphore `key` (lib/semaphore.js) instead of a
   * lock; `kind`: a lock's kind for the diagnostics channels (default 'lock').
   */
  _acquireResolved(native, key, o, raise, permit, kind = 'lock') {
    return new Promise((resolve, reject) => {
      const ownerSeq = ++this._owners
      const pending = new PendingAcquire(this, key, ownerSeq, o, raise, resolve, reject, permit)
      const req = native.track(pending)
      pending.req = req
      pending.trace = permit === undefined
        ? observe.acquireStart(this, key, kind, o.ttl, ownerSeq, 1)
        : observe.acquireStart(this, key, permit.kind, o.ttl, ownerSeq, permit.count)
      const wait = o.wait === Infinity ? -1 : o.wait
      const auto = o.autoExtend ? o.extendEvery : 0
      const maxHold = o.maxHold === Infinity ? -1 : o.maxHold
      const signal = o.signal
      if (signal !== undefined) {
        pending.onAbort = () => native.cancel(req)
        signal.addEventListener('abort', pending.onAbort, ONCE)
      }
      native.acquireOp(req, key, ownerSeq, {
        ttl: o.ttl,
        wait,
        maxAttempts: -1,
        retryDelay: o.retryDelay,
        jitter: o.jitter,
        data: o.encoded,
        extendEvery: auto,
        maxHold,
        flags: (signal === undefined ? FLAGS.watchExpiry : FLAGS.watchExpiry | FLAGS.cancellable) | (o.fencing ? 0 : FLAGS.unfenced) |
          (auto !== 0 && observe.extensionsTraced() ? FLAGS.reportExtensions : 0),
        permits: permit === undefined ? 0 : permit.count,
        limit: permit === undefined ? 0 : permit.limit,
      })
      if (pending.trace !== null) observe.acquireEnd(pending.trace)
    })
  }

  /**
   * @internal One acquisition with the semantics of a drop-in face: an explicit `owner`
   * (the value stored under the key) and `spec` = { ttl, maxAttempts (-1: unlimited),
   * retryDelay, plain (store the bare owner, the redislock wire format; with fencing false,
   * redislock's own `SET key owner PX ttl NX`), fencing (false: no token; default true),
   * onLost }. No wait deadline: the attempts bound it. Resolves with a Lock, or null when
   * still busy.
   */
  _claim(key, owner, spec) {
    let native
    try {
      v.checkKey(key)
      native = this._native()
    } catch (err) {
      return Promise.reject(err)
    }
    return new Promise((resolve, reject) => {
      const o = { ttl: spec.ttl, onLost: spec.onLost, signal: undefined }
      // The owner string stands where a modern lock keeps its owner's sequence number.
      const pending = new PendingAcquire(this, key, owner, o, false, resolve, reject)
      const req = native.track(pending)
      pending.req = req
      pending.trace = observe.acquireStart(this, key, 'lock', spec.ttl, owner, 1)
      native.acquireOp(req, key, owner, {
        ttl: spec.ttl,
        wait: -1,
        maxAttempts: spec.maxAttempts,
        retryDelay: spec.retryDelay,
        jitter: 0,
        data: undefined,
        extendEvery: 0,
        maxHold: -1,
        flags: FLAGS.watchExpiry | (spec.plain ? FLAGS.plain : 0) | (spec.fencing === false ? FLAGS.unfenced : 0),
        permits: 0,
        limit: 0,
      })
      if (pending.trace !== null) observe.acquireEnd(pending.trace)
    })
  }

  /**
   * Acquires `key`, waiting up to `options.wait` ms (default 10 000). Rejects with a
   * LockAcquisitionError if it is still held by someone else then.
   */
  acquire(key, options) {
    return this._acquire(key, options, this._defaults.wait, true)
  }

  /** Validates acquire options over this client's defaults, with `waitDefault`. */
  _resolveWith(options, waitDefault) {
    return options === undefined ? this._defaultOptions(waitDefault) : resolveAcquireOptions(this._defaults, options, waitDefault)
  }

  /**
   * A counting semaphore of `options.limit` permits named `name` (at most
   * `limits().maxPermits`). Every process that uses it must give the same limit. A
   * semaphore lives apart from the lock of the same name, but a read-write lock is a
   * semaphore: do not give a semaphore and a read-write lock one name.
   */
  semaphore(name, options) {
    const limit = checkSemaphore(name, options)
    this._native()
    return new Semaphore(this, name, limit)
  }

  /** A read-write lock named `name`: many readers or one writer (see lib/rwlock.js). */
  readWriteLock(name) {
    v.checkKey(name, 'name')
    this._native()
    return new ReadWriteLock(this, name)
  }

  /** Validates acquire options over this client's defaults (acquire's wait default). */
  _resolve(options) {
    return resolveAcquireOptions(this._defaults, options, this._defaults.wait)
  }

  /**
   * Acquires every key of `keys` (at most `limits().maxKeysPerCall`), holding all or none:
   * the keys are taken in one order every process agrees on, so acquireAll calls over
   * overlapping sets never deadlock. `options.wait` bounds the whole set. Resolves with a
   * MultiLock; rejects, holding none, with the error that stopped it.
   */
  acquireAll(keys, options) {
    return acquireAll(this, keys, options)
  }

  /** Acquires `key` if it is free (by default without waiting); resolves null when busy. */
  tryAcquire(key, options) {
    return this._acquire(key, options, 0, false)
  }

  /**
   * Runs `fn(lock)` while holding `key` (auto-extended by default) and releases it afterwards.
   * Resolves with fn's result; rejects with fn's error if it threw, or with the LockLostError
   * if the lock was lost while fn ran.
   */
  async withLock(key, options, fn) {
    if (typeof options === 'function' && fn === undefined) {
      fn = options
      options = undefined
    }
    v.checkFunction(fn, 'fn')
    return this._withHeld((opts) => this.acquire(key, opts), options, fn)
  }

  /**
   * withLock's body over any acquisition: `take(opts)` acquires (a lock, permits, a read or
   * write hold) with the caller's options, auto-extended by default.
   */
  async _withHeld(take, options, fn) {
    if (options !== undefined && options !== null) v.checkObject(options, 'options')
    const userOnLost = options == null ? undefined : own(options, 'onLost')
    if (userOnLost !== undefined) v.checkFunction(userOnLost, 'options.onLost')
    // The loss is reported through withLock's rejection, so it is heard even without onLost.
    const onLost = (err) => { if (userOnLost) userOnLost(err) }
    const opts = { ...(options ?? {}), onLost }
    // Auto-extended unless the caller says otherwise (undefined or null: the default, as in acquire).
    if (own(opts, 'autoExtend') == null) opts.autoExtend = true
    const lock = await take(opts)
    let result
    try {
      result = await fn(lock)
    } catch (err) {
      await lock.release().catch(() => {})
      throw err
    }
    // A loss the routine saw through lock.held may not have been delivered yet: settle it.
    const lostError = lock._checkLost()
    await lock.release()
    if (lostError) throw lostError
    return result
  }

  /**
   * Takes over the lock `key` that `options.owner` holds (another process's, or this one's
   * before a restart): it moves atomically to a new owner of this client with a new fencing
   * token, and is extended and released from now on by this client; the former holder hears
   * of its loss at its next renewal (in this client, at once). Resolves with the Lock, or
   * null when that owner no longer holds it. Options: `owner`, and `ttl`, `autoExtend`,
   * `extendEvery`, `maxHold`, `onLost`, `fencing` as for `acquire`.
   */
  adopt(key, options) {
    return adoptLock(this, key, options)
  }

  /**
   * The Web Locks API's `request` across processes (lib/weblocks.js): runs `callback(lock)`
   * while holding the lock `name` (`options.mode` 'exclusive' or 'shared') and resolves with
   * its result.
   */
  request(name, options, callback) {
    return webLocks.request(this, name, options, callback)
  }

  /** The Web Locks API's `query`: `{ held, pending }` (lib/weblocks.js). */
  query() {
    return webLocks.query(this)
  }

  /**
   * Runs `fn` at each tick of `when` (a cron expression, or an interval in ms: a number or
   * `{ every }`) on one of the processes that schedule `name`; a tick whose lock is held
   * elsewhere is skipped, never queued (lib/jobs.js, docs/jobs.md). Returns the Job.
   */
  schedule(name, when, fn, options) {
    return jobs.schedule(this, name, when, fn, options)
  }

  /**
   * Runs `fn` once if job `name`'s lock is free: resolves `{ ran, result, run }` (`ran` false
   * when skipped); rejects with fn's error or the LockLostError (lib/jobs.js).
   */
  runOnce(name, fn, options) {
    return jobs.runOnce(this, name, fn, options)
  }

  /** The last run of every job, as recorded in the store (lib/jobs.js). */
  jobs(options) {
    return jobs.listJobs(this, options)
  }

  /** Identifies this client in `query()`'s answers (the `clientId` of its locks). */
  get clientId() {
    // The prefix's random part: what every owner of this client starts with, up to its first
    // dot (the identity fields follow it, lib/identity.js).
    return this._ownerPrefix.slice(0, this._ownerPrefix.indexOf('.'))
  }

  /** Reads who holds `key`: `{ key, owner, fencingToken, remainingMs, data }`, or null if free. */
  async inspect(key) {
    v.checkKey(key)
    const native = this._native()
    const raw = await native.request((req) => native.addon.inspect(req, key))
    return toInfo(key, raw)
  }

  /**
   * Frees `key` whoever holds it: an operator's tool for a lock whose holder is gone or stuck.
   * Resolves true if a live lock was freed. Its holder learns of it at its next extension (or
   * when its lease would have ended) and reports the lock lost (`not-owned`).
   */
  async forceRelease(key) {
    v.checkKey(key)
    const native = this._native()
    return native.request((req) => native.addon.forceRelease(req, key))
  }

  /**
   * Held locks whose names start with `prefix` (default: all), at most `options.limit`
   * (default 1 000): `[{ key, owner, fencingToken, remainingMs, data }]`, in no particular
   * order. On Redis every key with an expiry under the prefix is listed: a lock in the
   * redislock format cannot be told from another key (its `fencingToken` is null).
   */
  async list(prefix = '', options) {
    if (typeof prefix !== 'string') throw v.typeError('prefix', 'of type string', prefix)
    if (!prefix.isWellFormed()) throw v.valueError('prefix', 'must not contain lone surrogates', prefix)
    let limit = 1000
    if (options !== undefined) {
      v.checkObject(options, 'options')
      v.checkKnownKeys(options, LIST_OPTIONS, 'options')
      const l = own(options, 'limit')
      if (l !== undefined) limit = v.checkInt(l, 'options.limit', 1, 1_000_000)
    }
    const native = this._native()
    const raw = await native.request((req) => native.addon.list(req, prefix, limit))
    return raw.map((l) => toInfo(l.key, l.info))
  }

  /** The current leader of election `name` (see `elect`), or null. */
  leader(name) {
    return this.inspect(name)
  }

  /** Campaigns for leadership of `name` until resigned or the client closes. */
  elect(name, options = {}) {
    v.checkKey(name, 'name')
    v.checkObject(options, 'options')
    return new Election(this, name, options)
  }

  /**
   * What this client and its store's engine keep right now: `held` (locks this client holds),
   * `waiting` (acquisitions queued in this process for this store), `scheduled` (leases the
   * heartbeat scheduler looks after), `subscriptions` (names whose releases this process
   * listens for: Redis channels, PostgreSQL notifications, MySQL's doorbell, …),
   * `cleanups` (grants whose reply came too late, being given back in the background).
   */
  stats() {
    if (this._closed) return { held: 0, waiting: 0, scheduled: 0, subscriptions: 0, cleanups: 0 }
    return this._native_.addon.stats()
  }

  /** Number of locks this client holds. */
  get heldCount() {
    return this._closed ? 0 : this._native_.addon.heldCount()
  }

  /**
   * Stops heartbeats, cancels pending acquisitions and releases every held lock. Idempotent.
   * The connection is shared with other clients of the same server and closed once none is
   * left; it never keeps the process alive.
   */
  async close() {
    if (this._closed) return
    debug('client', () => `client for ${this._where} closing`)
    // Jobs stop first: a running fn gets its bound to finish, and its lock and record are
    // settled while the client still works.
    if (this._jobs.size !== 0 || this._stoppingJobs !== null) {
      // One stop for concurrent close() calls: each waits for the runs to settle.
      this._stoppingJobs ??= jobs.stopJobs(this)
      await this._stoppingJobs
      if (this._closed) return
    }
    const native = this._native_
    native.flushOps()
    const closing = native.request((req) => native.addon.close(req))
    this._closed = true
    for (const lock of native.holders.values()) {
      lock._state = RELEASED
      observe.releasedByClose(lock)
    }
    native.holders.clear()
    try {
      await closing
    } finally {
      // The native side holds the wake-up function, which holds this client: let go of it
      // so a closed client can be collected.
      native.dispose()
    }
  }

  [Symbol.asyncDispose]() {
    return this.close()
  }

  [inspect.custom](depth, options, inspectFn = inspect) {
    const shown = { store: this._where, closed: this._closed, defaults: this._defaults }
    return `LockClient ${inspectFn(shown, options)}`
  }

  /** What `JSON.stringify` shows: where it connects (password masked) and whether it is closed. */
  toJSON() {
    return { store: this._where, closed: this._closed }
  }
}

/**
 * Connects to a lock store: a URL of a scheme the registry knows (lib/registry.js), or a
 * multi-server Redis form (lib/topology.js). Resolves once the store answers (unless `lazy`).
 * The registry says which stores take `options.tls` and the other store options; the DynamoDB
 * options are checked by lib/dynamodb.js. Everything is checked before any I/O.
 */
async function connect(url, options = {}) {
  // Parsed here once; the client, its native bridge and the diagnostics read this object.
  const target = parseTarget(url)
  const o = checkConnectOptions(options)
  const dynamo = dynamoOptions(target, o)
  if (o.tls !== undefined) o.tls = normalizeTls(o.tls, 'options.tls')
  const client = new LockClient(target, { ...o, dynamodb: dynamo.native, secrets: dynamo.secrets })
  if (o.lazy !== true) {
    try {
      await client.ping()
    } catch (err) {
      await client.close().catch(() => {})
      throw err
    }
  }
  return client
}

/**
 * Checks `connect()`'s options that do not depend on the URL, before any I/O; returns their
 * own properties, without a prototype for the native side to look up either. Exported for
 * the drop-in faces, which check the options they pass before the URL is looked at.
 */
function checkConnectOptions(options) {
  v.checkObject(options, 'options')
  v.checkKnownKeys(options, CONNECT_OPTIONS, 'options')
  const o = stripUndefined(options)
  if (o.ttl !== undefined) v.checkInt(o.ttl, 'options.ttl')
  if (o.retryDelay !== undefined) v.checkInt(o.retryDelay, 'options.retryDelay')
  if (o.jitter !== undefined) v.checkNumber(o.jitter, 'options.jitter', 0, 1)
  if (o.connectTimeout !== undefined) v.checkInt(o.connectTimeout, 'options.connectTimeout')
  if (o.responseTimeout !== undefined) v.checkInt(o.responseTimeout, 'options.responseTimeout')
  if (o.poolSize !== undefined) v.checkInt(o.poolSize, 'options.poolSize', 1, LIMITS.maxPoolSize)
  if (o.lazy !== undefined) v.checkBoolean(o.lazy, 'options.lazy')
  if (o.name !== undefined) checkName(o.name)
  if (o.identity !== undefined) v.checkBoolean(o.identity, 'options.identity')
  if (o.table !== undefined && (typeof o.table !== 'string' || !TABLE_NAME.test(o.table))) {
    throw v.valueError('options.table', `must be 1 to ${LIMITS.maxTableNameBytes} letters, digits or underscores`, o.table)
  }
  return o
}

module.exports = { connect, checkConnectOptions, LockClient }
