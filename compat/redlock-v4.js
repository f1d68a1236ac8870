'use strict'
// The node-redlock 4 face (`deadbolt/redlock/v4`, npm's `latest` redlock): Redlock with
// lock/acquire, lockWithOptions, unlock/release, extend, disposer and quit, each taking a
// callback or returning a promise; Redlock.Lock and Redlock.LockError; the `clientError`
// event. Same wire as the v5 face (compat/redlock-wire.js): v4, v5 and face processes exclude
// each other. node-redlock 4.2.0's own test.js runs against it (__test__/redlock.spec.test.js).
// Promises are native ones with bluebird's nodeify/asCallback/done and filtered catch, and
// disposer() works with bluebird's Promise.using, without bluebird installed.
// Where the original has a bug this face follows its intent (see docs/redlock.md):
// - retryCount 0 given to lockWithOptions means no retry (the original took the default);
// - a failed extension attempt is retried as an extension (the original released the lock
//   between its attempts, so no retry could succeed), and not at all once a quorum refused it
//   (the lock is gone).

const { EventEmitter } = require('events')
const { inspect } = require('util')
const { CompatPromise } = require('./compat-promise')
const wire = require('./redlock-wire')

/** A server's script answered fewer keys than asked: a vote against, not a client error. */
class Refusal extends Error {}

const defaults = { driftFactor: 0.01, retryCount: 10, retryDelay: 200, retryJitter: 100 }

/** What node-redlock 4 returned bluebird promises for: a native one with its idioms. */
class V4Promise extends CompatPromise {
  /** bluebird's `done(onFulfilled, onRejected)`: like then, an error left unhandled is thrown. */
  done(onFulfilled, onRejected) {
    this.then(onFulfilled, onRejected).catch((err) => { setImmediate(() => { throw err }) })
  }

  // What bluebird's Promise.using asks of the promise behind a disposer (see disposer()).
  _setDisposable(d) { Object.defineProperty(this, '_disposer', { value: d, writable: true, configurable: true }) }
  _isDisposable() { return this._disposer !== undefined }
  _getDisposer() { return this._disposer }
  _unsetDisposable() { this._disposer = undefined }
}

function settle(promise, callback) {
  const p = new V4Promise((resolve, reject) => promise.then(resolve, reject))
  return typeof callback === 'function' ? p.nodeify(callback) : p
}

/** Any failure of this face: `attempts` made; `code` names the operation. */
function LockError(message, attempts, code = 'ERR_LOCK_ACQUISITION') {
  Error.call(this)
  Error.captureStackTrace(this, LockError)
  this.name = 'LockError'
  this.message = message || 'Failed to lock the resource.'
  this.attempts = attempts
  this.code = code
}
Object.setPrototypeOf(LockError.prototype, Error.prototype)
Object.setPrototypeOf(LockError, Error)

/** A held lock on `resource` (a name or an array of names). */
function Lock(redlock, resource, value, expiration, attempts, attemptsRemaining) {
  this.redlock = redlock
  this.resource = resource
  this.value = value
  this.expiration = expiration
  this.attempts = attempts
  this.attemptsRemaining = attemptsRemaining
}

/** Releases this lock (see Redlock#unlock). */
Lock.prototype.unlock = function unlock(callback) {
  return this.redlock.unlock(this, callback)
}

/** Extends this lock to `ttl` ms from now (see Redlock#extend). */
Lock.prototype.extend = function extend(ttl, callback) {
  return this.redlock.extend(this, ttl, callback)
}

/**
 * @param {Array<object | string>} clients ioredis, node-redis or node_redis 3 clients or
 *   clusters, or redis:// URLs
 * @param {object} [options] driftFactor, retryCount (-1: forever), retryDelay, retryJitter,
 *   lockScript/unlockScript/extendScript (functions of the default text)
 */
function Redlock(clients, options) {
  EventEmitter.call(this)
  options = options || {}
  const num = (k) => (typeof options[k] === 'number' ? options[k] : defaults[k])
  this.driftFactor = num('driftFactor')
  this.retryCount = num('retryCount')
  this.retryDelay = num('retryDelay')
  this.retryJitter = num('retryJitter')
  this.lockScript = wire.customScript(wire.ACQUIRE, options.lockScript)
  this.unlockScript = wire.customScript(wire.RELEASE, options.unlockScript)
  this.extendScript = wire.customScript(wire.EXTEND, options.extendScript)
  const given = wire.toClients(clients)
  // Not enumerable: util.inspect would otherwise show each client's options, password included.
  Object.defineProperty(this, 'servers', { value: given.map((g) => g.client), enumerable: false, writable: true })
  // Acquisitions pausing between attempts, woken by this Redlock's unlocks.
  Object.defineProperty(this, '_waiting', { value: new wire.Waiting(), enumerable: false })
  if (this.servers.length === 0) throw new Error('Redlock must be instantiated with at least one redis server.')
  this.scripts = {
    lockScript: wire.script(this.lockScript),
    unlockScript: wire.script(this.unlockScript),
    extendScript: wire.script(this.extendScript),
  }
}
Object.setPrototypeOf(Redlock.prototype, EventEmitter.prototype)
Object.setPrototypeOf(Redlock, EventEmitter)

Redlock.Lock = Lock
Redlock.LockError = LockError

/** Quits every client. */
Redlock.prototype.quit = function quit(callback) {
  return settle(Promise.all(this.servers.map((c) => wire.quitClient(c))), callback)
}

/** Locks `resource` (a name or an array) for `ttl` ms, retrying per the options. */
Redlock.prototype.acquire = Redlock.prototype.lock = function lock(resource, ttl, callback) {
  return this._lock(resource, null, ttl, {}, callback)
}

/** lock() with per-call retryCount and retryDelay. */
Redlock.prototype.acquireWithOptions = Redlock.prototype.lockWithOptions = function lockWithOptions(resource, ttl, options, callback) {
  return this._lock(resource, null, ttl, options, callback)
}

/** A bluebird disposer: Promise.using(redlock.disposer(r, ttl), fn) unlocks after fn. */
Redlock.prototype.disposer = function disposer(resource, ttl, errorHandler) {
  errorHandler = errorHandler || function () {}
  const promise = this._lock(resource, null, ttl, {})
  let held = null
  promise.then((lock) => { held = lock }, () => {})
  return {
    promise: () => promise,
    data: () => null,
    resource: () => held,
    tryDispose() {
      promise._unsetDisposable()
      if (held === null) return null
      return held.unlock().catch(errorHandler)
    },
  }
}

/** Releases `lock`: resolves when a quorum released every key of it, else a LockError. */
Redlock.prototype.release = Redlock.prototype.unlock = function unlock(lock, callback) {
  const resource = Array.isArray(lock.resource) ? lock.resource : [lock.resource]
  lock.expiration = 0
  const run = async () => {
    const sent = wire.round(this.servers, this.scripts.unlockScript, resource, [lock.value], () => new Refusal('refused'), (err, refused) => {
      if (!refused) this.emit('clientError', err)
    })
    // The release's commands are written: a waiter woken now sends its attempt behind them.
    this._waiting.wake(resource)
    const r = await sent
    const stats = await r.stats
    if (stats.votesFor.size >= stats.quorumSize) return undefined
    throw new LockError(`Unable to fully release the lock on resource "${lock.resource}".`, undefined, 'ERR_LOCK_RELEASE')
  }
  return settle(run(), callback)
}

/** Extends `lock` to `ttl` ms from now; resolves the same Lock, updated. */
Redlock.prototype.extend = function extend(lock, ttl, callback) {
  if (lock.expiration < Date.now()) {
    return settle(Promise.reject(new LockError(`Cannot extend lock on resource "${lock.resource}" because the lock has already expired.`, 0, 'ERR_LOCK_EXTEND')), callback)
  }
  const run = async () => {
    const extension = await this._lock(lock.resource, lock.value, ttl, {})
    lock.value = extension.value
    lock.expiration = extension.expiration
    return lock
  }
  return settle(run(), callback)
}

/**
 * Grants (`value` null: a fresh lock) or extends (`value`: that lock's) `resource` for `ttl`
 * ms. Each attempt waits for every server; it wins with a quorum of votes and validity left.
 */
Redlock.prototype._lock = function _lock(resource, value, ttl, options, callback) {
  if (typeof options === 'function' && callback === undefined) {
    callback = options
    options = {}
  }
  options = options || {}
  const resources = Array.isArray(resource) ? resource : [resource]
  const extending = value !== null
  const lockValue = extending ? value : wire.randomValue()
  const s = extending ? this.scripts.extendScript : this.scripts.lockScript
  const retryCount = typeof options.retryCount === 'number' ? options.retryCount : this.retryCount
  const retryDelay = typeof options.retryDelay === 'number' ? options.retryDelay : this.retryDelay
  const onError = (err, refused) => {
    if (!refused) this.emit('clientError', err)
  }
  const run = async () => {
    let attempts = 0
    for (;;) {
      attempts++
      const r = await wire.round(this.servers, s, resources, [lockValue, ttl], () => new Refusal('refused'), onError)
      const stats = await r.stats
      const expiration = wire.expirationOf(r.start, ttl, this.driftFactor)
      if (stats.votesFor.size >= stats.quorumSize && expiration > Date.now()) {
        return new Lock(this, resource, lockValue, expiration, attempts, retryCount - attempts)
      }
      if (!extending) {
        // Give back the partial grant on every server before trying again.
        const back = await wire.round(this.servers, this.scripts.unlockScript, resources, [lockValue], () => new Refusal('refused'), onError)
        await back.stats
      }
      const gone = extending && stats.votesAgainst.size - countErrors(stats) > stats.membershipSize - stats.quorumSize
      if (gone || (retryCount !== -1 && attempts > retryCount)) {
        throw new LockError(`Exceeded ${retryCount} attempts to lock the resource "${resource}".`, attempts, extending ? 'ERR_LOCK_EXTEND' : 'ERR_LOCK_ACQUISITION')
      }
      const pause = wire.retryPause(retryDelay, this.retryJitter)
      await (extending ? wire.delay(pause) : this._waiting.pause(resources, pause))
    }
  }
  return settle(run(), callback)
}

/** How many votes against were client errors rather than refusals. */
function countErrors(stats) {
  let n = 0
  for (const err of stats.votesAgainst.values()) if (!(err instanceof Refusal)) n++
  return n
}

Redlock.prototype._random = function _random() {
  return wire.randomValue()
}

/** Shows the options and the number of servers, never the clients' options. */
Redlock.prototype[inspect.custom] = function () {
  const { driftFactor, retryCount, retryDelay, retryJitter } = this
  return `Redlock { servers: ${this.servers.length}, ${inspect({ driftFactor, retryCount, retryDelay, retryJitter })} }`
}

module.exports = Redlock
