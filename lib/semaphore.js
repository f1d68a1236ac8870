'use strict'
// Counting semaphores: `locks.semaphore(name, { limit })`. A permit is a Lock of the
// semaphore's name (release, extend, signal, held, fencingToken, `await using`), kept alive by
// the same heartbeats. The store decides who gets permits, by its clock: waiters of every
// process are served in order and nobody overtakes a waiter it would delay (src/store/permits.rs).

const { inspect } = require('util')
const { Lock } = require('./lock')
const v = require('./validate')
const { abortReason } = require('./pending')
const { withToJSON } = require('./json')
const { holderOf } = require('./identity')
const { adoptPermits } = require('./adopt')
const { own } = v

const MAX_PERMITS = v.LIMITS.maxPermits

/** Permits of a semaphore: what `Semaphore#acquire` resolves with. */
class Permit extends Lock {
  constructor(client, id, key, ownerSeq, token, ttl, onLost, permits) {
    super(client, id, key, ownerSeq, token, ttl, onLost)
    /** How many permits this holds. */
    this.permits = permits
  }

  /** The semaphore's name (the same as `key`). */
  get semaphore() {
    return this.key
  }

  toJSON() {
    return { ...super.toJSON(), permits: this.permits }
  }

  [inspect.custom](depth, options, inspectFn = inspect) {
    const shown = { semaphore: this.key, permits: this.permits, owner: this.owner, fencingToken: this.fencingToken, ttl: this.ttl, held: this.held }
    return `Permit ${inspectFn(shown, options)}`
  }
}

/**
 * Splits a semaphore call's options into the permit count (`options.permits`, default 1,
 * within 1..limit) and the acquire options (those of `acquire` but `data` and `reentrant`).
 */
function permitOptions(options, limit) {
  if (options === undefined || options === null) return { count: 1, rest: undefined }
  v.checkObject(options, 'options')
  const count = own(options, 'permits') ?? 1
  v.checkInt(count, 'options.permits', 1, limit)
  for (const k of ['data', 'reentrant', 'fencing']) {
    if (own(options, k) !== undefined) throw v.valueError(`options.${k}`, 'is not supported by semaphores', options[k])
  }
  const rest = { ...options }
  delete rest.permits
  return { count, rest }
}

/** A counting semaphore of `limit` permits. Obtain one from `LockClient#semaphore`. */
class Semaphore {
  constructor(client, name, limit, PermitClass = Permit) {
    /** The semaphore's name. */
    this.name = name
    /** How many permits it has. */
    this.limit = limit
    this._client = client
    this._Permit = PermitClass
  }

  _take(options, waitDefault, raise, count) {
    const client = this._client
    let o
    let native
    let n = count
    try {
      let rest
      if (n === undefined) ({ count: n, rest } = permitOptions(options, this.limit))
      else rest = options
      o = client._resolveWith(rest, waitDefault)
      native = client._native()
      if (o.signal?.aborted) throw abortReason(o.signal)
    } catch (err) {
      return Promise.reject(err)
    }
    const label = `${n} of ${this.limit} permit${this.limit === 1 ? '' : 's'} of semaphore "${this.name}"`
    // What the diagnostics channels call it (lib/observe.js): a read-write lock's permits are
    // a read hold (one) or the write hold (all).
    const kind = this._Permit === Permit ? 'semaphore' : n === MAX_PERMITS ? 'write' : 'read'
    return client._acquireResolved(native, this.name, o, raise, { count: n, limit: this.limit, label, Class: this._Permit, kind })
  }

  /**
   * Takes `options.permits` permits (default 1), all or none, waiting up to `options.wait`
   * (the client's default wait). Rejects with a LockAcquisitionError if they are not free by
   * then. Options: those of `acquire` except `data` and `reentrant`.
   */
  acquire(options) {
    return this._take(options, this._client._defaults.wait, true)
  }

  /** Takes the permits if they are free now (by default without waiting); null otherwise. */
  tryAcquire(options) {
    return this._take(options, 0, false)
  }

  /**
   * Runs `fn(permit)` while holding the permits (auto-extended by default) and releases them
   * afterwards; rejects with fn's error, or with the LockLostError if they were lost.
   */
  async withPermit(options, fn) {
    if (typeof options === 'function' && fn === undefined) {
      fn = options
      options = undefined
    }
    v.checkFunction(fn, 'fn')
    return this._client._withHeld((opts) => this.acquire(opts), options, fn)
  }

  /**
   * Takes over the permits `options.owner` holds (see `LockClient#adopt`): resolves with a
   * Permit keeping their token and count, or null when that owner holds none.
   */
  adopt(options) {
    return adoptPermits(this, options, () => 'semaphore')
  }

  /** How many permits are taken now, read from the store. */
  async permits() {
    const holders = await this.holders()
    return holders.reduce((sum, h) => sum + h.permits, 0)
  }

  /** The live holders, read from the store: `[{ owner, permits, fencingToken, remainingMs }]`. */
  async holders() {
    const native = this._client._native()
    const raw = await native.request((req) => native.addon.permits(req, this.name))
    return raw.map((h) => withToJSON({ owner: h.owner, holder: holderOf(h.owner), permits: h.permits, fencingToken: h.fencingToken, remainingMs: Number(h.remainingMs) }))
  }

  toJSON() {
    return { name: this.name, limit: this.limit }
  }

  [inspect.custom](depth, options, inspectFn = inspect) {
    return `Semaphore ${inspectFn({ name: this.name, limit: this.limit }, options)}`
  }
}

/** Validates `locks.semaphore(name, { limit })`'s arguments. */
function checkSemaphore(name, options) {
  v.checkKey(name, 'name')
  if (options === undefined || options === null) throw v.typeError('options', 'an object with a limit', options)
  v.checkObject(options, 'options')
  v.checkKnownKeys(options, new Set(['limit']), 'options')
  const limit = own(options, 'limit')
  v.checkInt(limit, 'options.limit', 1, MAX_PERMITS)
  return limit
}

module.exports = { Permit, Semaphore, checkSemaphore, permitOptions, MAX_PERMITS }
