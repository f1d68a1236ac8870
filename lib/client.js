'use strict'
// The modern API: connect() → LockClient → Lock. Leases, heartbeats, fencing tokens, data,
// AbortSignal, Symbol.asyncDispose, leader election. One implementation for every backend.

const { randomBytes } = require('node:crypto')
const { inspect } = require('node:util')
const { Native, FLAGS } = require('./native')
const { redactUrl } = require('./redact')
const {
  LockAcquisitionError,
  LockExtendError,
  LockLostError,
  LockClosedError,
  LockAbortedError,
} = require('./errors')
const v = require('./validate')
const { normalizeTls } = require('./tls')

const { own } = v

const HELD = 0
const RELEASED = 1
const LOST = 2

const LOST_MESSAGES = {
  'not-owned': 'was released or taken by another owner',
  expired: 'expired before it was extended',
  unreachable: 'could not be extended: the store was unreachable until the lease ran out',
  'max-hold': 'was given up because maxHold was reached',
}

const DEFAULTS = Object.freeze({
  ttl: 10_000,
  wait: 10_000,
  retryDelay: 50,
  jitter: 0.5,
  autoExtend: false,
  maxHold: Infinity,
})

/** A held lock. Obtain one from `LockClient#acquire`, `tryAcquire` or `withLock`. */
class Lock {
  // Kept small: a process may hold tens of thousands. The owner string and the bigint token
  // are made on demand, and what only a loss needs lives in one side record.
  constructor(client, id, key, ownerSeq, token, ttl, onLost) {
    this._client = client
    this._id = id
    this.key = key
    this._ownerSeq = ownerSeq
    // A number, or a bigint above 2^53.
    this._token = token
    this.ttl = ttl
    this._state = HELD
    /** null, or { onLost, ac, lostError } once a loss callback, signal or loss exists. */
    this._extra = onLost === undefined ? null : { onLost, ac: null, lostError: null }
  }

  /** Owner token (the value stored under the key). */
  get owner() {
    return this._client._ownerPrefix + this._ownerSeq.toString(36)
  }

  /** Strictly increases per key across acquisitions: pass it to the resource you protect. */
  get fencingToken() {
    return BigInt(this._token)
  }

  _extraState() {
    if (this._extra === null) this._extra = { onLost: undefined, ac: null, lostError: null }
    return this._extra
  }

  get _lostError() {
    return this._extra === null ? null : this._extra.lostError
  }

  /**
   * True until the lock is released or lost. It turns false at the lease's local deadline
   * (the send time of the request that granted or last extended it, plus the ttl) even if
   * the loss has not been reported yet: a stalled event loop, an extension still in flight.
   */
  get held() {
    if (this._state !== HELD) return false
    const native = this._client._nativeOrNull()
    return native !== null && native.isHeld(this._id)
  }

  /** Aborted with a LockLostError when the lock is lost. */
  get signal() {
    const x = this._extraState()
    if (x.ac === null) {
      x.ac = new AbortController()
      if (this._state === LOST) x.ac.abort(x.lostError)
    }
    return x.ac.signal
  }

  _lost(reason) {
    if (this._state !== HELD) return
    this._state = LOST
    const err = new LockLostError(`Lock on "${this.key}" ${LOST_MESSAGES[reason] ?? 'was lost'}`, { reason })
    err.key = this.key
    err.fencingToken = this.fencingToken
    const x = this._extraState()
    x.lostError = err
    let heard = false
    if (x.ac !== null) {
      heard = true
      x.ac.abort(err)
    }
    if (x.onLost) {
      heard = true
      try {
        x.onLost(err)
      } catch (e) {
        process.nextTick(() => { throw e })
      }
    }
    // A lost lock is never silent: with nobody listening, say so on the process.
    if (!heard) process.emitWarning(err)
  }

  /**
   * Sets the remaining lease to `ttl` ms (default: the lock's ttl). Rejects with a
   * LockExtendError if the lock is no longer held (the lock then counts as lost).
   */
  async extend(ttl = this.ttl) {
    v.checkInt(ttl, 'ttl')
    if (this._state !== HELD) {
      throw new LockExtendError(`Lock on "${this.key}" is no longer held`, { cause: this._lostError ?? undefined })
    }
    const native = this._client._native()
    const ok = await native.request((req) => native.extendOp(req, this._id, ttl))
    if (!ok) {
      this._lost('not-owned')
      throw new LockExtendError(`Lock on "${this.key}" had expired or was taken`, { cause: this._lostError ?? undefined })
    }
    this.ttl = ttl
  }

  /**
   * Releases the lock. Idempotent: resolves true if this call released it, false if it had
   * already been released, had expired or was taken.
   */
  async release() {
    if (this._state === RELEASED) return false
    const wasHeld = this._state === HELD
    this._state = RELEASED
    const native = this._client._nativeOrNull()
    if (native === null) return false
    native.holders.delete(this._id)
    if (!wasHeld) return false
    return native.request((req) => native.releaseOp(req, this._id))
  }

  async [Symbol.asyncDispose]() {
    await this.release()
  }

  /** What `JSON.stringify` shows: the public state, never the client behind it. */
  toJSON() {
    return { key: this.key, owner: this.owner, fencingToken: String(this.fencingToken), ttl: this.ttl, held: this.held }
  }

  [inspect.custom](depth, options, inspectFn = inspect) {
    const shown = { key: this.key, owner: this.owner, fencingToken: this.fencingToken, ttl: this.ttl, held: this.held }
    return `Lock ${inspectFn(shown, options)}`
  }
}

/**
 * Validates acquire options over the client's defaults. Builds one fixed-shape object (no
 * spreads): this runs on every acquisition.
 */
/**
 * A pending acquisition: `drain` settles it directly, so the caller's promise resolves with
 * the Lock without another promise in between.
 */
class PendingAcquire {
  constructor(client, key, ownerSeq, o, raise, resolve, reject) {
    this.client = client
    this.key = key
    this.ownerSeq = ownerSeq
    this.o = o
    this.raise = raise
    this.res = resolve
    this.rej = reject
    this.req = 0
    this.onAbort = null
  }

  _detach() {
    if (this.onAbort !== null) this.o.signal.removeEventListener('abort', this.onAbort)
  }

  /** Outcome from the native side: a fencing token, or false when busy. */
  resolve(token) {
    this._detach()
    if (token === false) {
      if (this.raise) this.rej(new LockAcquisitionError(`Could not acquire lock on "${this.key}"`))
      else this.res(null)
      return
    }
    if (this.client._closed) {
      // close() was called while the grant was on its way: close releases it, so it is no
      // grant (an acquisition pending at close() rejects, never resolves with a dead lock).
      this.rej(new LockClosedError('The lock client has been closed'))
      return
    }
    const lock = new Lock(this.client, this.req, this.key, this.ownerSeq, token, this.o.ttl, this.o.onLost)
    this.client._native_.holders.set(this.req, lock)
    this.res(lock)
  }

  reject(err) {
    this._detach()
    const signal = this.o.signal
    if (err.code === 'ERR_LOCK_ABORTED' && signal?.aborted) err = abortReason(signal)
    this.rej(err)
  }
}

function resolveAcquireOptions(defaults, options, waitDefault) {
  if (options === undefined || options === null) options = EMPTY
  else v.checkObject(options, 'options')
  // Own enumerable properties only, as a spread copies them: a value someone put on
  // Object.prototype must not change every lock. One pass over the keys costs less than a
  // hasOwn per option (this runs on every acquisition that passes options).
  let ttl, wait, retryDelay, jitter, autoExtend, extendEvery, maxHold, data, signal, onLost
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
  }
  v.checkInt(o.ttl, 'options.ttl')
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
  if (data !== undefined) o.encoded = v.encodeData(data, 'options.data')
  if (o.signal !== undefined) v.checkSignal(o.signal, 'options.signal')
  if (o.onLost !== undefined) v.checkFunction(o.onLost, 'options.onLost')
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

function abortReason(signal) {
  return signal.reason ?? new LockAbortedError('The operation was aborted')
}

/** Decodes a native lock info into the public shape. */
function toInfo(key, raw) {
  if (!raw) return null
  const token = BigInt(raw.fencingToken)
  return {
    key,
    owner: raw.owner,
    // 0 means the store cannot tell (a lock taken in the redislock wire format).
    fencingToken: token === 0n ? null : token,
    remainingMs: Number(raw.remainingMs),
    data: v.decodeData(raw.data),
  }
}

/** A connection to one lock store. Create with `connect(url)`. */
class LockClient {
  /** @internal */
  constructor(url, options = {}) {
    const { ttl, retryDelay, jitter, connectTimeout, responseTimeout, table, poolSize, tls } = options
    this._defaults = { ...DEFAULTS, ...stripUndefined({ ttl, retryDelay, jitter }) }
    // Shown by util.inspect with any password masked; the URL itself is not kept.
    this._where = redactUrl(url)
    this._resolvedDefaults = new Map()
    // Owner tokens: a random prefix per client and a counter (unique, and cheaper than a
    // UUID per acquisition).
    this._ownerPrefix = randomBytes(12).toString('base64url') + '.'
    this._owners = 0
    // The TLS material goes to the native side and is kept nowhere here (nor printed by
    // util.inspect or JSON.stringify of the client).
    this._native_ = new Native(url, stripUndefined({ connectTimeout, responseTimeout, table, poolSize, tls }))
    this._closed = false
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
    await native.request((req) => native.native.ping(req))
  }

  _acquire(key, options, waitDefault, raise) {
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
    return new Promise((resolve, reject) => {
      const ownerSeq = ++this._owners
      const owner = this._ownerPrefix + ownerSeq.toString(36)
      const pending = new PendingAcquire(this, key, ownerSeq, o, raise, resolve, reject)
      const req = native.track(pending)
      pending.req = req
      const wait = o.wait === Infinity ? -1 : o.wait
      const auto = o.autoExtend ? o.extendEvery : 0
      const maxHold = o.maxHold === Infinity ? -1 : o.maxHold
      const signal = o.signal
      if (signal !== undefined) {
        pending.onAbort = () => native.cancel(req)
        signal.addEventListener('abort', pending.onAbort, ONCE)
      }
      native.acquireOp(req, key, owner, {
        ttl: o.ttl,
        wait,
        maxAttempts: -1,
        retryDelay: o.retryDelay,
        jitter: o.jitter,
        data: o.encoded,
        extendEvery: auto,
        maxHold,
        flags: signal === undefined ? FLAGS.watchExpiry : FLAGS.watchExpiry | FLAGS.cancellable,
      })
    })
  }

  /**
   * Acquires `key`, waiting up to `options.wait` ms (default 10 000). Rejects with a
   * LockAcquisitionError if it is still held by someone else then.
   */
  acquire(key, options) {
    return this._acquire(key, options, this._defaults.wait, true)
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
    if (options !== undefined && options !== null) v.checkObject(options, 'options')
    const userOnLost = options == null ? undefined : own(options, 'onLost')
    if (userOnLost !== undefined) v.checkFunction(userOnLost, 'options.onLost')
    // The loss is reported through withLock's rejection, so it is heard even without onLost.
    const onLost = (err) => { if (userOnLost) userOnLost(err) }
    const opts = { ...(options ?? {}), onLost }
    // Auto-extended unless the caller says otherwise (undefined or null: the default, as in acquire).
    if (own(opts, 'autoExtend') == null) opts.autoExtend = true
    const lock = await this.acquire(key, opts)
    let result
    try {
      result = await fn(lock)
    } catch (err) {
      await lock.release().catch(() => {})
      throw err
    }
    const lostError = lock._lostError
    await lock.release()
    if (lostError) throw lostError
    return result
  }

  /** Reads who holds `key`: `{ key, owner, fencingToken, remainingMs, data }`, or null if free. */
  async inspect(key) {
    v.checkKey(key)
    const native = this._native()
    const raw = await native.request((req) => native.native.inspect(req, key))
    return toInfo(key, raw)
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
   * heartbeat scheduler looks after), `subscriptions` (Redis release channels listened to).
   */
  stats() {
    if (this._closed) return { held: 0, waiting: 0, scheduled: 0, subscriptions: 0 }
    return this._native_.native.stats()
  }

  /** Number of locks this client holds. */
  get heldCount() {
    return this._closed ? 0 : this._native_.native.heldCount()
  }

  /**
   * Stops heartbeats, cancels pending acquisitions and releases every held lock. Idempotent.
   * The connection is shared with other clients of the same server and closed once none is
   * left; it never keeps the process alive.
   */
  async close() {
    if (this._closed) return
    const native = this._native_
    native.flushOps()
    const closing = native.request((req) => native.native.close(req))
    this._closed = true
    for (const lock of native.holders.values()) lock._state = RELEASED
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

/** A campaign for leadership of one name. Create with `LockClient#elect`. */
class Election {
  constructor(client, name, options = {}) {
    v.checkKey(name, 'name')
    v.checkObject(options, 'options')
    // A campaign on a closed client would never start: say so now.
    client._native()
    const ttl = own(options, 'ttl') === undefined ? 5_000 : options.ttl
    const data = own(options, 'data')
    const retryDelay = own(options, 'retryDelay')
    const onElected = own(options, 'onElected')
    const onRevoked = own(options, 'onRevoked')
    const signal = own(options, 'signal')
    v.checkInt(ttl, 'options.ttl')
    if (onElected !== undefined) v.checkFunction(onElected, 'options.onElected')
    if (onRevoked !== undefined) v.checkFunction(onRevoked, 'options.onRevoked')
    this._client = client
    this.name = name
    this._options = stripUndefined({ ttl, data, retryDelay, autoExtend: true, wait: Infinity })
    // Validate the rest once, up front, so bad input throws here and not in the background.
    resolveAcquireOptions(client._defaults, this._options, Infinity)
    this._onElected = onElected
    this._onRevoked = onRevoked
    this._ac = new AbortController()
    if (signal !== undefined) {
      v.checkSignal(signal, 'options.signal')
      if (signal.aborted) this._ac.abort(signal.reason)
      else signal.addEventListener('abort', () => this.resign(), ONCE)
    }
    this._lock = null
    this._done = this._campaign()
  }

  /** True while this candidate holds leadership. */
  get isLeader() {
    return this._lock !== null && this._lock.held
  }

  /** The current term (the leadership lock's fencing token), or null when not leader. */
  get term() {
    return this.isLeader ? this._lock.fencingToken : null
  }

  async _campaign() {
    while (!this._ac.signal.aborted) {
      let lock
      let lost
      const revoked = new Promise((resolve) => { lost = resolve })
      try {
        lock = await this._client.acquire(this.name, { ...this._options, signal: this._ac.signal, onLost: lost })
      } catch (err) {
        if (this._ac.signal.aborted) return
        if (err.code === 'ERR_LOCK_CLOSED') return
        // The store failed: try again after a pause rather than give up the campaign.
        await new Promise((r) => setTimeout(r, this._options.retryDelay ?? 250).unref())
        continue
      }
      this._lock = lock
      if (!this._ac.signal.aborted && this._onElected) safeCall(this._onElected, lock)
      const err = await Promise.race([revoked, this._aborted()])
      this._lock = null
      if (err instanceof LockLostError) {
        if (this._onRevoked) safeCall(this._onRevoked, err)
      } else {
        // Resigned, possibly while the grant was on its way here: give it back.
        await lock.release().catch(() => {})
      }
    }
  }

  _aborted() {
    const s = this._ac.signal
    return s.aborted ? Promise.resolve(null) : new Promise((r) => s.addEventListener('abort', () => r(null), ONCE))
  }

  /** Stops campaigning and gives up leadership if held. */
  async resign() {
    this._ac.abort()
    await this._done
  }

  [Symbol.asyncDispose]() {
    return this.resign()
  }
}

function safeCall(fn, arg) {
  try {
    const r = fn(arg)
    if (r && typeof r.then === 'function') r.then(undefined, (e) => process.nextTick(() => { throw e }))
  } catch (e) {
    process.nextTick(() => { throw e })
  }
}

const SCHEMES = /^(redis|rediss|redis\+unix|unix|mysql|mariadb|memory):\/\//i

/**
 * Connects to a lock store: `redis://`, `rediss://`, `mysql://`, `mariadb://` or
 * `memory://[name]`. Resolves once the store answers. `options.tls` ({ ca, cert, key,
 * servername, rejectUnauthorized }) applies to `rediss://` and `mysql://`.
 */
async function connect(url, options = {}) {
  if (typeof url !== 'string') throw v.typeError('url', 'of type string', url)
  if (!SCHEMES.test(url)) {
    // Named by its scheme only: the rest of a URL may hold a password.
    const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]
    const err = new TypeError(`The argument 'url' must start with redis://, rediss://, mysql://, mariadb:// or memory://. Received ${scheme ? `a URL with scheme "${scheme}:"` : 'a string that is not a URL'}`)
    err.code = 'ERR_INVALID_ARG_VALUE'
    throw err
  }
  if (!url.isWellFormed()) {
    // Not echoed: it may carry a password.
    const err = new TypeError("The argument 'url' must not contain lone surrogates (they have no UTF-8 encoding)")
    err.code = 'ERR_INVALID_ARG_VALUE'
    throw err
  }
  v.checkObject(options, 'options')
  // Own properties only, and no prototype for the native side to look up either.
  const o = stripUndefined(options)
  if (o.ttl !== undefined) v.checkInt(o.ttl, 'options.ttl')
  if (o.retryDelay !== undefined) v.checkInt(o.retryDelay, 'options.retryDelay')
  if (o.jitter !== undefined) v.checkNumber(o.jitter, 'options.jitter', 0, 1)
  if (o.connectTimeout !== undefined) v.checkInt(o.connectTimeout, 'options.connectTimeout')
  if (o.responseTimeout !== undefined) v.checkInt(o.responseTimeout, 'options.responseTimeout')
  if (o.poolSize !== undefined) v.checkInt(o.poolSize, 'options.poolSize', 1, 1000)
  if (o.lazy !== undefined) v.checkBoolean(o.lazy, 'options.lazy')
  if (o.table !== undefined && (typeof o.table !== 'string' || !/^[A-Za-z0-9_]{1,64}$/.test(o.table))) {
    throw v.valueError('options.table', 'must be 1 to 64 letters, digits or underscores', o.table)
  }
  if (o.tls !== undefined) o.tls = normalizeTls(o.tls, 'options.tls')
  const client = new LockClient(url, o)
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

module.exports = { connect, LockClient, Lock, Election }
