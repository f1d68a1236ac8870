'use strict'
// A held lock: what `acquire` resolves with. `held` asks the native side, so it turns false at
// the lease's local deadline even before the loss is heard.

const { inspect } = require('util')
// Node's own timers (see lib/native.js): under jest's fake timers the global would never fire.
const timers = require('timers')
const { LockExtendError, LockLostError } = require('./errors')
const v = require('./validate')
const { debug } = require('./debug')
const { newAbortController } = require('./abort')
const observe = require('./observe')

const HELD = 0
const RELEASED = 1
const LOST = 2

const LOST_MESSAGES = {
  'not-owned': 'was released or taken by another owner',
  expired: 'expired before it was extended',
  unreachable: 'could not be extended: the store was unreachable until the lease ran out',
  'max-hold': 'was given up because maxHold was reached',
}

/**
 * Losses the native side reports with a reason of its own that JavaScript shows as another
 * one plus a `cause` with a code: a lease left in a SQLite file that was deleted or replaced
 * is not owned in the file now at the path.
 */
const LOST_CAUSES = {
  'store-replaced': {
    reason: 'not-owned',
    code: 'ERR_LOCK_STORE_REPLACED',
    message: 'the SQLite database file was deleted or replaced while the lock was held in it',
  },
}

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
    /**
     * null, or { onLost, ac, lostError, later, stopped } once a loss callback, signal or loss
     * exists (`later`: the reason of a loss heard before anyone listened, reported at
     * setImmediate; `stopped`: its holder called `stopExtending`).
     */
    this._extra = onLost === undefined ? null : { onLost, ac: null, lostError: null, later: null, stopped: false }
    /**
     * null, or what lib/observe.js remembers of a lock granted while someone listened on the
     * diagnostics channels ({ kind, store, at }). A field, not a WeakMap entry: a WeakMap set
     * per acquisition (and its ephemeron work in every GC) cost more (bench/PROFILE.md).
     */
    this._observed = null
  }

  /** Owner token (the value stored under the key). */
  get owner() {
    // A number (this client's prefix and a counter), or the owner itself for a lock taken
    // with an explicit owner (the redislock face).
    const s = this._ownerSeq
    return typeof s === 'string' ? s : this._client._ownerPrefix + s.toString(36)
  }

  /**
   * Strictly increases per key across acquisitions: pass it to the resource you protect.
   * null for a lock taken with `fencing: false`.
   */
  get fencingToken() {
    const t = this._token
    return t === 0 ? null : BigInt(t)
  }

  _extraState() {
    if (this._extra === null) this._extra = { onLost: undefined, ac: null, lostError: null, later: null, stopped: false }
    return this._extra
  }

  get _lostError() {
    return this._extra === null ? null : this._extra.lostError
  }

  /**
   * The loss error, after reporting a loss the native side already knows of but has not
   * delivered yet (its event is still queued, or the local deadline passed with an extension
   * in flight); null while the lock is held or once it was released.
   */
  _checkLost() {
    if (this._state === HELD && !this.held) {
      const native = this._client._nativeOrNull()
      if (native !== null) {
        native.drain()
        if (this._state === HELD) this._report(this._extra?.later ?? 'expired')
      }
    }
    return this._lostError
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

  /**
   * Until when this process treats the lock as held, in ms since the epoch (like `Date.now()`):
   * the lease's local deadline (the send time of the request that granted or last extended
   * it, plus the ttl, less 1 % + 2 ms), or the end of `maxHold` if sooner; null once released,
   * lost or past it. On Redlock this is the algorithm's validity (ttl − elapsed − drift).
   */
  get validUntil() {
    if (this._state !== HELD) return null
    const native = this._client._nativeOrNull()
    const ms = native === null ? 0 : native.validFor(this._id)
    return ms > 0 ? Math.floor(Date.now() + ms) : null
  }

  /** Aborted with a LockLostError when the lock is lost. */
  get signal() {
    const x = this._extraState()
    if (x.ac === null) {
      x.ac = newAbortController()
      if (this._state === LOST) x.ac.abort(x.lostError)
    }
    return x.ac.signal
  }

  /**
   * The native side reports the lock lost. With nobody listening yet the report waits for the
   * current turn of the event loop to end: a grant that comes after its lease ran out (a
   * stalled store answers late) is reported lost in the very batch that grants it, before the
   * caller's `await` has even returned the lock, let alone read its `signal`. Promise
   * continuations all run before `setImmediate`, so a caller that listens as soon as it holds
   * the lock hears the loss instead of a process warning. `held` is false meanwhile.
   */
  _lost(reason) {
    if (this._state !== HELD) return
    const x = this._extra
    if (x === null || (x.ac === null && !x.onLost)) {
      const later = this._extraState()
      if (later.later === null) {
        later.later = reason
        timers.setImmediate(() => this._report(reason))
      }
      return
    }
    this._report(reason)
  }

  /** Reports the loss now: aborts `signal`, calls `onLost`, and warns if neither is there. */
  _report(reason) {
    if (this._state !== HELD) return
    this._state = LOST
    debug('lost', () => `lost ${JSON.stringify(this.key)}: the lock object learns it (${reason}), token ${this._token}`)
    const known = LOST_CAUSES[reason]
    let err
    if (known === undefined) {
      err = new LockLostError(`Lock on "${this.key}" ${LOST_MESSAGES[reason] ?? 'was lost'}`, { reason })
    } else {
      const cause = new Error(known.message)
      cause.code = known.code
      err = new LockLostError(`Lock on "${this.key}" was lost: ${known.message}`, { reason: known.reason, cause })
    }
    err.key = this.key
    err.fencingToken = this.fencingToken
    const x = this._extraState()
    x.lostError = err
    observe.lost(this, reason, err, x.stopped)
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
    // A lost lock is never silent: with nobody listening, say so on the process. A lease its
    // holder chose to let lapse (`stopExtending`) ends as asked: no warning.
    if (!heard && !x.stopped) process.emitWarning(err)
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
    const ok = await observe.traceExtend(this, ttl, () => native.request((req) => native.extendOp(req, this._id, ttl)))
    if (!ok) {
      this._report(this._extra?.later ?? 'not-owned')
      throw new LockExtendError(`Lock on "${this.key}" had expired or was taken`, { cause: this._lostError ?? undefined })
    }
    this.ttl = ttl
  }

  /**
   * Stops extending the lock for good, without releasing it: no more heartbeats, and closing
   * the client leaves it too. Its lease lapses at its end (the local deadline; `held` turns
   * false and `signal` aborts with a LockLostError of reason `expired` then, with no process
   * warning) unless it is released first or another client adopts it (`adopt` with this
   * lock's `owner`). `maxHold` no longer applies. Returns false when it was not held.
   */
  stopExtending() {
    if (this._state !== HELD) return false
    const native = this._client._nativeOrNull()
    if (native === null || !native.addon.stopExtending(this._id)) return false
    this._extraState().stopped = true
    return true
  }

  /**
   * Releases the lock. Idempotent: resolves true if this call released it, false if it had
   * already been released, had expired or was taken.
   */
  release() {
    // Not an `async` function: returning the release's own promise from one would cost a
    // second promise and two more microtask turns (resolving with a thenable) per release.
    if (this._state === RELEASED) return Promise.resolve(false)
    // A loss heard before anyone listened (see _lost) happened before this release: say so now.
    if (this._state === HELD && this._extra !== null && this._extra.later !== null) this._report(this._extra.later)
    const wasHeld = this._state === HELD
    this._state = RELEASED
    const native = this._client._nativeOrNull()
    if (native === null) return Promise.resolve(false)
    native.holders.delete(this._id)
    if (!wasHeld) return Promise.resolve(false)
    return observe.traceRelease(this, native)
  }

  async [Symbol.asyncDispose]() {
    await this.release()
  }

  /** What `JSON.stringify` shows: the public state, never the client behind it. */
  toJSON() {
    return { key: this.key, owner: this.owner, fencingToken: this._token === 0 ? null : String(this._token), ttl: this.ttl, held: this.held }
  }

  [inspect.custom](depth, options, inspectFn = inspect) {
    const shown = { key: this.key, owner: this.owner, fencingToken: this.fencingToken, ttl: this.ttl, held: this.held }
    return `Lock ${inspectFn(shown, options)}`
  }
}

module.exports = { Lock, HELD, RELEASED, LOST }
