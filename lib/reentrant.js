'use strict'
// Reentrant holds: `acquire(key, { reentrant: true })` in a client that already holds `key`
// through a reentrant acquisition returns another hold on the same lock (same lease, same
// fencing token) instead of waiting for itself. The lock is released with its last hold.

const { Lock, HELD, RELEASED } = require('./lock')
const { LockExtendError } = require('./errors')
const { ONCE, now } = require('./options')
const { abortReason } = require('./pending')
const v = require('./validate')

/**
 * One key's reentrant lock in one client: the Lock, how many holds are open, and the
 * acquisition on its way (which a second reentrant caller waits for rather than queueing
 * behind itself).
 */
class Reentry {
  constructor() {
    this.lock = null
    this.holds = 0
    this.pending = null
  }
}

/** A hold on a reentrant lock: a Lock whose release gives back one hold. */
class Hold extends Lock {
  /** `fencing`: false for a hold asked for with `fencing: false` (no token shown). */
  constructor(entry, onLost, fencing) {
    const lock = entry.lock
    super(lock._client, lock._id, lock.key, lock._ownerSeq, fencing ? lock._token : 0, lock.ttl, undefined)
    this._entry = entry
    entry.holds++
    if (onLost !== undefined) {
      // The lease is shared: a nested hold hears the loss through the lock's signal.
      const signal = lock.signal
      if (signal.aborted) queueMicrotask(() => onLost(signal.reason))
      else signal.addEventListener('abort', () => onLost(signal.reason), ONCE)
    }
  }

  /** The shared lease's length (extend() of any hold sets it). */
  get ttl() {
    return this._entry === undefined ? this._ttl : this._entry.lock.ttl
  }

  set ttl(value) {
    this._ttl = value
  }

  /** True while this hold is open and the shared lock is held. */
  get held() {
    return this._state === HELD && this._entry.lock.held
  }

  /** The shared lock's signal: aborted with a LockLostError when the lock is lost. */
  get signal() {
    return this._entry.lock.signal
  }

  get _lostError() {
    return this._entry.lock._lostError
  }

  _checkLost() {
    return this._entry.lock._checkLost()
  }

  /** Extends the shared lease (see Lock#extend). */
  async extend(ttl) {
    if (this._state !== HELD) {
      throw new LockExtendError(`Lock on "${this.key}" is no longer held by this hold`)
    }
    await this._entry.lock.extend(ttl)
  }

  /**
   * Stops the shared lease's heartbeat (see Lock#stopExtending), only from the one hold left
   * open: while other holds share the lock, it is theirs too, and this returns false.
   */
  stopExtending() {
    return this._state === HELD && this._entry.holds === 1 && this._entry.lock.stopExtending()
  }

  /**
   * Gives back this hold; the last one releases the lock. Resolves true if this call gave
   * back an open hold on a live lock (for the last hold: if it released the lock).
   */
  async release() {
    if (this._state !== HELD) return false
    this._state = RELEASED
    const entry = this._entry
    entry.holds--
    if (entry.holds > 0) return entry.lock.held
    const holds = this._client._reentries
    if (holds.get(this.key) === entry) holds.delete(this.key)
    return entry.lock.release()
  }
}

/** Resolves when `promise` settles, whatever its outcome; rejects if `signal` aborts first. */
function settled(promise, signal) {
  const done = promise.then(() => {}, () => {})
  if (signal === undefined) return done
  if (signal.aborted) return Promise.reject(abortReason(signal))
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(abortReason(signal))
    signal.addEventListener('abort', onAbort, ONCE)
    done.then(() => {
      signal.removeEventListener('abort', onAbort)
      resolve()
    })
  })
}

/**
 * A reentrant acquisition of `key` by `client` with resolved options `o`: another hold on the
 * lock if the client already holds it reentrantly, else a new acquisition whose lock later
 * reentrant calls share. A nested hold shares the first one's lease, ttl, heartbeat and
 * data; its own options only bound its wait (for an acquisition of the same key on its way)
 * and add its `onLost`.
 */
async function acquireReentrant(client, key, o, raise) {
  const started = now()
  const entries = client._reentries
  for (;;) {
    const entry = entries.get(key)
    if (entry === undefined) break
    if (entry.pending !== null) {
      // This client is acquiring the key reentrantly already: share that outcome rather than
      // queue behind our own acquisition.
      await settled(entry.pending, o.signal)
      continue
    }
    if (entry.lock.held) {
      // A hold that needs a token cannot share a lock taken without one.
      if (o.fencing && entry.lock.fencingToken === null) {
        throw v.valueError('options.fencing', 'must be false while this client holds the key reentrantly with fencing: false', true)
      }
      return new Hold(entry, o.onLost, o.fencing)
    }
    // The shared lock was lost: a new acquisition takes its place.
    entries.delete(key)
    break
  }
  const native = client._native()
  let opts = o
  if (o.wait !== Infinity && o.wait > 0) {
    const left = Math.max(0, o.wait - (now() - started))
    if (left !== o.wait) opts = { ...o, wait: left }
  }
  const entry = new Reentry()
  entries.set(key, entry)
  const forget = () => {
    entry.pending = null
    if (entries.get(key) === entry) entries.delete(key)
  }
  entry.pending = client._acquireResolved(native, key, opts, raise).then((lock) => {
    if (lock === null) {
      forget()
      return null
    }
    entry.pending = null
    entry.lock = lock
    return new Hold(entry, undefined, true)
  }, (err) => {
    forget()
    throw err
  })
  return entry.pending
}

module.exports = { Hold, acquireReentrant }
