'use strict'
// An acquisition on its way: the native completion settles it directly.

const { LockAcquisitionError, LockClosedError, LockAbortedError } = require('./errors')
const { Lock } = require('./lock')
const observe = require('./observe')

/**
 * A pending acquisition: `drain` settles it directly, so the caller's promise resolves with
 * the Lock without another promise in between.
 */
class PendingAcquire {
  /** `permit`: { count, limit, label } for a semaphore's permits, else undefined (a lock). */
  constructor(client, key, ownerSeq, o, raise, resolve, reject, permit) {
    this.client = client
    this.key = key
    this.ownerSeq = ownerSeq
    this.o = o
    this.raise = raise
    this.res = resolve
    this.rej = reject
    this.req = 0
    this.onAbort = null
    this.permit = permit
    /** null, or the reason of a loss reported before the grant itself (see Native#settle). */
    this.lostEarly = null
    /** The diagnostics context of this acquisition (lib/observe.js), or null: nobody listens. */
    this.trace = null
  }

  /** Publishes how the acquisition ended, when someone traces it. */
  _traced(result, lock, err) {
    if (this.trace !== null) observe.acquireSettled(this.trace, result, lock, err)
  }

  _detach() {
    if (this.onAbort !== null) this.o.signal.removeEventListener('abort', this.onAbort)
  }

  /**
   * Outcome from the native side: a fencing token, or false when busy. `late`: the grant's
   * lock was no longer live when its record was taken (see Native#settle).
   */
  resolve(token, late = false) {
    this._detach()
    if (token === false) {
      if (this.raise) {
        const what = this.permit === undefined ? `lock on "${this.key}"` : this.permit.label
        const err = new LockAcquisitionError(`Could not acquire ${what}`)
        this._traced('timeout', null, err)
        this.rej(err)
      } else {
        this._traced('refused', null, null)
        this.res(null)
      }
      return
    }
    const signal = this.o.signal
    if (signal !== undefined && signal.aborted && !this.client._closed) {
      // The grant raced the abort (the store answered before the cancellation reached the
      // native side): give the lock back; the caller sees the abort, never a lock, and only
      // once the lock is given back, so that whoever looks right after finds it free.
      const err = abortReason(signal)
      this._traced('aborted', null, err)
      this.client._native_.release(this.req).catch(() => {}).then(() => this.rej(err))
      return
    }
    if (this.client._closed) {
      // close() was called while the grant was on its way: close releases it, so it is no
      // grant (an acquisition pending at close() rejects, never resolves with a dead lock).
      const err = new LockClosedError('The lock client has been closed')
      this._traced('error', null, err)
      this.rej(err)
      return
    }
    if (this.lostEarly !== null || late) {
      // Past its lease's local deadline by the time this thread sees it (the event loop was
      // stalled longer than the ttl; the native side checks every grant when the drain takes
      // the records, so no crossing per grant here): the caller could never act on it. Given back, and the
      // acquisition ends as one that got nothing, as the engine ends one whose grant the
      // store sent that late (docs/design.md, "Grants whose reply was lost").
      this.client._native_.release(this.req).catch(() => {})
      this.resolve(false)
      return
    }
    const lock = this.permit === undefined
      // `fencing: false`: no token, whatever the store had at hand (0 stands for none).
      ? new Lock(this.client, this.req, this.key, this.ownerSeq, this.o.fencing === false ? 0 : token, this.o.ttl, this.o.onLost)
      : new this.permit.Class(this.client, this.req, this.key, this.ownerSeq, token, this.o.ttl, this.o.onLost, this.permit.count)
    this.client._native_.holders.set(this.req, lock)
    if (this.trace !== null) observe.acquireSettled(this.trace, 'granted', lock, null)
    else observe.noteGrant(lock, this.permit === undefined ? 'lock' : this.permit.kind, this.client._store)
    this.res(lock)
    if (this.lostEarly !== null) {
      this.client._native_.holders.delete(this.req)
      lock._lost(this.lostEarly)
    }
  }

  reject(err) {
    this._detach()
    const signal = this.o.signal
    if (err.code === 'ERR_LOCK_ABORTED' && signal?.aborted) err = abortReason(signal)
    if (this.trace !== null) observe.acquireSettled(this.trace, observe.rejectedResult(err, signal), null, err)
    this.rej(err)
  }
}

function abortReason(signal) {
  return signal.reason ?? new LockAbortedError('The operation was aborted')
}

module.exports = { PendingAcquire, abortReason }
