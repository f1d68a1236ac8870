'use strict'
// Leader election: a campaign that holds one auto-extended lock per term.

const { LockLostError } = require('./errors')
const { ELECTION_TTL, ONCE, resolveAcquireOptions, stripUndefined } = require('./options')
const v = require('./validate')
const { newAbortController } = require('./abort')
const { tokenJSON } = require('./json')
const observe = require('./observe')
// Node's timers: the global `setTimeout` may be jsdom's or a fake one under jest.
const timers = require('timers')

const { own } = v

/** The options `elect` takes. */
const ELECTION_OPTIONS = new Set(['ttl', 'data', 'retryDelay', 'onElected', 'onRevoked', 'signal'])

/** A campaign for leadership of one name. Create with `LockClient#elect`. */
class Election {
  constructor(client, name, options = {}) {
    v.checkKey(name, 'name')
    v.checkObject(options, 'options')
    v.checkKnownKeys(options, ELECTION_OPTIONS, 'options')
    // A campaign on a closed client would never start: say so now.
    client._native()
    const ttl = own(options, 'ttl') === undefined ? ELECTION_TTL : options.ttl
    const data = own(options, 'data')
    const retryDelay = own(options, 'retryDelay')
    const onElected = own(options, 'onElected')
    const onRevoked = own(options, 'onRevoked')
    const signal = own(options, 'signal')
    // Elections are auto-extended: the heartbeat period (ttl / 3, at least 1) must be less than ttl.
    v.checkInt(ttl, 'options.ttl', 2)
    if (onElected !== undefined) v.checkFunction(onElected, 'options.onElected')
    if (onRevoked !== undefined) v.checkFunction(onRevoked, 'options.onRevoked')
    this._client = client
    this.name = name
    this._options = stripUndefined({ ttl, data, retryDelay, autoExtend: true, wait: Infinity })
    // Validate the rest once, up front, so bad input throws here and not in the background.
    resolveAcquireOptions(client._defaults, this._options, Infinity)
    this._onElected = onElected
    this._onRevoked = onRevoked
    this._ac = newAbortController()
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
        lock = await this._client._acquire(this.name, { ...this._options, signal: this._ac.signal, onLost: lost }, Infinity, true, 'election')
      } catch (err) {
        if (this._ac.signal.aborted) return
        if (err.code === 'ERR_LOCK_CLOSED') return
        // The store failed: try again after a pause rather than give up the campaign.
        await new Promise((r) => timers.setTimeout(r, this._options.retryDelay ?? 250).unref())
        continue
      }
      this._lock = lock
      observe.leadership(lock, true)
      if (!this._ac.signal.aborted && this._onElected) safeCall(this._onElected, lock)
      const err = await Promise.race([revoked, this._aborted()])
      this._lock = null
      observe.leadership(lock, false, err instanceof LockLostError ? 'lost' : 'resigned')
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

  /** What `JSON.stringify` shows: the name and the current term, never the client behind it. */
  toJSON() {
    return { name: this.name, isLeader: this.isLeader, term: tokenJSON(this.term) }
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

module.exports = { Election }
