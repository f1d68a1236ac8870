'use strict'
// Multi-key locks: `acquireAll(keys)` holds every key or none. Keys are taken one at a time in
// one order every process agrees on (JavaScript's string order), so two acquireAll calls over
// overlapping sets never wait for each other in a cycle: no deadlock, on every store.

const { inspect } = require('util')
const { newAbortController } = require('./abort')
const v = require('./validate')
const { now } = require('./options')
const { LockAcquisitionError } = require('./errors')

const { own } = v

/** Several locks held together. Obtain one from `LockClient#acquireAll`. */
class MultiLock {
  constructor(keys) {
    /** The keys, in the order the caller gave them. */
    this.keys = keys
    /** One Lock per key, in the same order. */
    this.locks = []
    // Set once the whole set is held: a loss before that rejects acquireAll instead.
    this._onLost = undefined
    this._lostError = null
    this._ac = null
  }

  /** True while every lock is held. */
  get held() {
    return this._lostError === null && this.locks.length === this.keys.length && this.locks.every((l) => l.held)
  }

  /** Aborted with the first LockLostError when any of the locks is lost. */
  get signal() {
    if (this._ac === null) {
      this._ac = newAbortController()
      if (this._lostError !== null) this._ac.abort(this._lostError)
    }
    return this._ac.signal
  }

  /** One of the locks was lost: the set is, once. */
  _lost(err) {
    if (this._lostError !== null) return
    this._lostError = err
    if (this._ac !== null) this._ac.abort(err)
    if (this._onLost !== undefined) {
      try {
        this._onLost(err)
      } catch (e) {
        process.nextTick(() => { throw e })
      }
    }
  }

  /** Sets the remaining lease of every lock; rejects with the first LockExtendError. */
  async extend(ttl) {
    await Promise.all(this.locks.map((l) => l.extend(ttl)))
  }

  /** Releases every lock. Resolves true if this call released them all. */
  async release() {
    const released = await Promise.all(this.locks.map((l) => l.release()))
    return released.length > 0 && released.every(Boolean)
  }

  async [Symbol.asyncDispose]() {
    await this.release()
  }

  toJSON() {
    return { keys: this.keys, held: this.held, locks: this.locks.map((l) => l.toJSON()) }
  }

  [inspect.custom](depth, options, inspectFn = inspect) {
    return `MultiLock ${inspectFn({ keys: this.keys, held: this.held }, options)}`
  }
}

/**
 * Acquires every key of `keys` with `options` (those of `acquire`; `wait` bounds the whole
 * set) and resolves with a MultiLock, or rejects, holding none, with the error that stopped
 * it (LockAcquisitionError for a key still busy at the deadline, LockLostError for a key lost
 * while it waited for the next). Without `autoExtend`, the keys taken first are extended to a
 * whole lease once the set is complete.
 */
async function acquireAll(client, keys, options) {
  if (!Array.isArray(keys)) throw v.typeError('keys', 'an array of strings', keys)
  const max = v.LIMITS.maxKeysPerCall
  if (keys.length === 0 || keys.length > max) throw v.rangeError('keys.length', `from 1 to ${max}`, keys.length)
  const seen = new Set()
  for (let i = 0; i < keys.length; i++) {
    v.checkKey(keys[i], `keys[${i}]`)
    if (seen.has(keys[i])) throw v.valueError(`keys[${i}]`, 'must not repeat an earlier key', keys[i])
    seen.add(keys[i])
  }
  if (options !== undefined && options !== null) v.checkObject(options, 'options')
  const opts = { ...(options ?? {}) }
  if (own(opts, 'reentrant') === true) throw v.valueError('options.reentrant', 'is not supported by acquireAll', true)
  const onLost = own(opts, 'onLost')
  if (onLost !== undefined) v.checkFunction(onLost, 'options.onLost')
  // Validates the rest once, before any lock is taken.
  const resolved = client._resolve(opts)
  const wait = resolved.wait
  const set = new MultiLock(keys.slice())
  opts.onLost = (err) => set._lost(err)
  const deadline = wait === Infinity ? Infinity : now() + wait
  const order = keys.slice().sort()
  const got = new Map()
  try {
    for (const key of order) {
      opts.wait = deadline === Infinity ? Infinity : Math.max(0, deadline - now())
      got.set(key, await client.acquire(key, opts))
    }
    // Lost while the later keys were awaited (a short lease without autoExtend): not all held.
    for (const lock of got.values()) lock._checkLost()
    if (set._lostError !== null) throw set._lostError
    // Without a heartbeat, the keys taken first spent part of their lease waiting for the
    // later ones: each is extended to a whole lease once the set is complete, so the set never
    // resolves with a lease about to run out (one its caller could not act on).
    if (!resolved.autoExtend) {
      await Promise.all(order.slice(0, -1).map((key) => got.get(key).extend()))
        .catch((err) => { throw set._lostError ?? err })
    }
    // Complete only past a lease's local deadline (the event loop stalled longer than the
    // ttl): the caller could not act on the set. Given back, and the call ends as one that got
    // nothing, as a single acquisition granted that late does (lib/pending.js).
    const late = order.find((key) => !got.get(key).held)
    if (late !== undefined) {
      throw set._lostError ?? new LockAcquisitionError(`Could not acquire the locks on ${JSON.stringify(keys)}: "${late}" was past its lease when the set was complete`)
    }
  } catch (err) {
    await Promise.all([...got.values()].map((l) => l.release().catch(() => {})))
    throw err
  }
  set.locks = keys.map((k) => got.get(k))
  set._onLost = onLost
  return set
}

module.exports = { MultiLock, acquireAll }
