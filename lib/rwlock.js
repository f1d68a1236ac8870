'use strict'
// Read-write locks: many readers or one writer. A read-write lock is a semaphore of
// MAX_PERMITS permits under its name: a reader takes one, a writer all of them. The store
// serves waiters in order and nobody overtakes a waiter it would delay, so a waiting writer
// holds back readers that come after it (it is not starved), and readers and writers draw
// fencing tokens from one sequence.

const { inspect } = require('util')
const { Permit, Semaphore, MAX_PERMITS } = require('./semaphore')
const v = require('./validate')
const { withToJSON } = require('./json')
const { adoptPermits } = require('./adopt')
const { own } = v

/** A read or write hold of a read-write lock. */
class RwHold extends Permit {
  /** 'read' or 'write'. */
  get mode() {
    return this.permits === MAX_PERMITS ? 'write' : 'read'
  }

  toJSON() {
    const { permits, ...rest } = super.toJSON()
    return { ...rest, mode: this.mode }
  }

  [inspect.custom](depth, options, inspectFn = inspect) {
    const shown = { key: this.key, mode: this.mode, owner: this.owner, fencingToken: this.fencingToken, ttl: this.ttl, held: this.held }
    return `RwHold ${inspectFn(shown, options)}`
  }
}

function checkRwOptions(options) {
  if (options === undefined || options === null) return options
  v.checkObject(options, 'options')
  for (const k of ['data', 'reentrant', 'permits', 'fencing']) {
    if (own(options, k) !== undefined) throw v.valueError(`options.${k}`, 'is not supported by read-write locks', options[k])
  }
  return options
}

/** Many readers or one writer. Obtain one from `LockClient#readWriteLock`. */
class ReadWriteLock {
  constructor(client, name) {
    /** The lock's name. */
    this.name = name
    this._sem = new Semaphore(client, name, MAX_PERMITS, RwHold)
  }

  _take(options, write, waitDefault, raise) {
    try {
      checkRwOptions(options)
    } catch (err) {
      return Promise.reject(err)
    }
    const wait = waitDefault === undefined ? this._sem._client._defaults.wait : waitDefault
    return this._sem._take(options, wait, raise, write ? MAX_PERMITS : 1)
  }

  /** Takes a read hold, waiting up to `options.wait`; rejects with a LockAcquisitionError. */
  read(options) {
    return this._take(options, false, undefined, true)
  }

  /** Takes the write hold, waiting up to `options.wait`; rejects with a LockAcquisitionError. */
  write(options) {
    return this._take(options, true, undefined, true)
  }

  /** Takes a read hold if no writer holds or waits (by default without waiting); else null. */
  tryRead(options) {
    return this._take(options, false, 0, false)
  }

  /** Takes the write hold if nobody holds or waits (by default without waiting); else null. */
  tryWrite(options) {
    return this._take(options, true, 0, false)
  }

  /** Runs `fn(hold)` under a read hold and releases it afterwards (see `withLock`). */
  withRead(options, fn) {
    return this._with(options, fn, false)
  }

  /** Runs `fn(hold)` under the write hold and releases it afterwards (see `withLock`). */
  withWrite(options, fn) {
    return this._with(options, fn, true)
  }

  async _with(options, fn, write) {
    if (typeof options === 'function' && fn === undefined) {
      fn = options
      options = undefined
    }
    v.checkFunction(fn, 'fn')
    return this._sem._client._withHeld((opts) => this._take(opts, write, undefined, true), options, fn)
  }

  /**
   * Takes over the read or write hold `options.owner` holds (see `LockClient#adopt`):
   * resolves with an RwHold keeping its token and mode, or null when that owner holds none.
   */
  adopt(options) {
    return adoptPermits(this._sem, options, (permits) => (permits === MAX_PERMITS ? 'write' : 'read'))
  }

  /** The live holders, read from the store: `[{ owner, mode, fencingToken, remainingMs }]`. */
  async holders() {
    const holders = await this._sem.holders()
    return holders.map(({ permits, ...h }) => withToJSON({ ...h, mode: permits === MAX_PERMITS ? 'write' : 'read' }))
  }

  toJSON() {
    return { name: this.name }
  }

  [inspect.custom](depth, options, inspectFn = inspect) {
    return `ReadWriteLock ${inspectFn({ name: this.name }, options)}`
  }
}

module.exports = { ReadWriteLock, RwHold }
