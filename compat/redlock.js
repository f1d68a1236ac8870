'use strict'
// The node-redlock 5 face (`deadbolt/redlock`): Redlock with acquire/extend/release/using/quit,
// Lock, ExecutionError and ResourceLockedError, the `error` event. Wire compatible with
// node-redlock 4 and 5 (see compat/redlock-wire.js): original and face processes exclude each
// other on the same resources. node-redlock 5.0.0-beta.2's own tests run against it
// (__test__/redlock.spec.test.js). Where the original has a bug, this face follows its
// documented intent (docs/redlock.md lists each, with its test):
// - a lock's expiration is reckoned from the attempt that won it, not from the first attempt
//   (node-redlock #169, #296, #299: using() then lost locks at its second extension, or never
//   ran its routine);
// - a grant already past its validity is not reported as held: it is given back and retried;
// - an extension or release that a quorum refused because the lock is no longer there is not
//   retried (nothing can bring it back): with retryCount -1 the original never settled;
// - using() whose signal aborted gives the lock back once, without retries, and settles with
//   the routine's outcome rather than waiting out release retries;
// - partial grants of a failed attempt are given back before the next attempt;
// - a round split evenly between two halves of the clients is a refusal, not a hang.

const { EventEmitter } = require('events')
const { inspect } = require('util')
const wire = require('./redlock-wire')

/** Marks an ExecutionError whose quorum found the lock gone (not retryable). */
const GONE = Symbol('gone')

/** node-redlock 5's defaults. */
const defaultSettings = Object.freeze({
  driftFactor: 0.01,
  retryCount: 10,
  retryDelay: 200,
  retryJitter: 100,
  automaticExtensionThreshold: 500,
})

/** One or more resources were locked by someone else (a client's vote against). */
class ResourceLockedError extends Error {
  constructor(message) {
    super(message)
    Object.defineProperty(this, 'name', { value: 'ResourceLockedError', enumerable: false, writable: true, configurable: true })
  }
}
Object.defineProperty(ResourceLockedError.prototype, 'code', { value: 'ERR_LOCK_RESOURCE_LOCKED', enumerable: true, writable: true, configurable: true })

/**
 * An operation did not win a quorum within its retries; `attempts` holds each attempt's
 * stats. `code` says which operation: ERR_LOCK_ACQUISITION, ERR_LOCK_EXTEND or ERR_LOCK_RELEASE.
 */
class ExecutionError extends Error {
  constructor(message, attempts, code = 'ERR_LOCK_ACQUISITION') {
    super(message)
    Object.defineProperty(this, 'name', { value: 'ExecutionError', enumerable: false, writable: true, configurable: true })
    this.attempts = attempts
    this.code = code
  }
}

/** Duration checks, with node-redlock's message. */
function checkDuration(duration) {
  if (typeof duration !== 'number' || Math.floor(duration) !== duration) {
    const err = new RangeError('Duration must be an integer value in milliseconds.')
    err.code = 'ERR_OUT_OF_RANGE'
    throw err
  }
}

/**
 * Settings as node-redlock reads them (a non-number keeps the default), checked: a retryCount
 * that is not an integer ≥ -1, or a negative or non-finite delay, jitter, drift or threshold,
 * would make the retry loop misbehave rather than fail.
 */
function checkSettings(s) {
  if (!Number.isSafeInteger(s.retryCount) || s.retryCount < -1) throw outOfRange('retryCount', 'an integer >= -1 (-1 retries forever)', s.retryCount)
  for (const k of ['driftFactor', 'retryDelay', 'retryJitter', 'automaticExtensionThreshold']) {
    if (!Number.isFinite(s[k]) || s[k] < 0) throw outOfRange(k, 'a finite number >= 0', s[k])
  }
  return s
}

function outOfRange(name, expected, value) {
  const err = new RangeError(`The value of "${name}" is out of range. It must be ${expected}. Received ${String(value)}`)
  err.code = 'ERR_OUT_OF_RANGE'
  return err
}

function checkResources(resources) {
  if (!Array.isArray(resources) || resources.length === 0 || !resources.every((r) => typeof r === 'string')) {
    const err = new TypeError('The "resources" argument must be a non-empty array of strings')
    err.code = 'ERR_INVALID_ARG_TYPE'
    throw err
  }
}

/** A held lock: its resources, value and expiration (ms since the epoch; 0 once released). */
class Lock {
  constructor(redlock, resources, value, attempts, expiration) {
    this.redlock = redlock
    this.resources = resources
    this.value = value
    this.attempts = attempts
    this.expiration = expiration
  }

  /** Releases the lock (see Redlock#release). */
  async release() {
    return this.redlock.release(this)
  }

  /** Extends the lock by `duration` ms from now; resolves a new Lock (see Redlock#extend). */
  async extend(duration) {
    return this.redlock.extend(this, duration)
  }
}

class Redlock extends EventEmitter {
  /**
   * @param {Iterable<object | string>} clients ioredis or node-redis clients or clusters, or
   *   redis:// URLs (one per independent server; a quorum is ⌊N/2⌋ + 1)
   * @param {object} [settings] driftFactor, retryCount (-1: forever), retryDelay,
   *   retryJitter, automaticExtensionThreshold
   * @param {object} [scripts] acquireScript, extendScript, releaseScript: strings, or
   *   functions of the default text
   */
  constructor(clients, settings = {}, scripts = {}) {
    super()
    // An `error` event is emitted for every client error, even one the quorum outvoted;
    // without a listener of the caller's, it must not crash the process.
    this.on('error', () => {})
    const given = wire.toClients(clients)
    const unique = new Map()
    for (const g of given) if (!unique.has(g.client)) unique.set(g.client, g)
    if (unique.size === 0) throw new Error('Redlock must be instantiated with at least one redis client.')
    // Not enumerable: util.inspect and JSON would otherwise dump each client's options,
    // password included.
    Object.defineProperty(this, 'clients', { value: new Set(unique.keys()), enumerable: false })
    Object.defineProperty(this, '_owned', { value: [...unique.values()].filter((g) => g.owned).map((g) => g.client), enumerable: false })
    Object.defineProperty(this, '_list', { value: [...unique.keys()], enumerable: false })
    // Acquisitions pausing between attempts, woken by this Redlock's releases.
    Object.defineProperty(this, '_waiting', { value: new wire.Waiting(), enumerable: false })
    settings = settings ?? {}
    const pick = (k) => (typeof settings[k] === 'number' ? settings[k] : defaultSettings[k])
    this.settings = checkSettings({
      driftFactor: pick('driftFactor'),
      retryCount: pick('retryCount'),
      retryDelay: pick('retryDelay'),
      retryJitter: pick('retryJitter'),
      automaticExtensionThreshold: pick('automaticExtensionThreshold'),
    })
    scripts = scripts ?? {}
    const text = (base, s) => (typeof s === 'string' ? s : wire.customScript(base, s))
    this.scripts = {
      acquireScript: wire.script(text(wire.ACQUIRE, scripts.acquireScript)),
      extendScript: wire.script(text(wire.EXTEND, scripts.extendScript)),
      releaseScript: wire.script(text(wire.RELEASE, scripts.releaseScript)),
    }
  }

  /** Quits every client (those given and those made from URLs). */
  async quit() {
    await Promise.all(this._list.map((c) => wire.quitClient(c)))
  }

  /**
   * Locks `resources` for `duration` ms, retrying per the settings. Rejects with an
   * ExecutionError when no attempt won a quorum with time left.
   */
  async acquire(resources, duration, settings) {
    checkDuration(duration)
    checkResources(resources)
    const value = wire.randomValue()
    const s = this._settings(settings)
    // A failed attempt's partial grants are given back before the next one (and after the
    // last): nothing is left held when this rejects.
    const { attempts, start } = await this._execute(this.scripts.acquireScript, resources, [value, duration], s, {
      code: 'ERR_LOCK_ACQUISITION',
      validUntil: (at) => wire.expirationOf(at, duration, s.driftFactor),
      giveBack: () => this._giveBack(resources, value),
    })
    return new Lock(this, resources, value, attempts, wire.expirationOf(start, duration, s.driftFactor))
  }

  /**
   * Releases `lock` on every server still holding it. Resolves once a quorum no longer holds
   * it; rejects with an ExecutionError otherwise. A refusal means the lock was not there any
   * more (expired or taken): retrying cannot change that, so it rejects at once.
   */
  async release(lock, settings) {
    lock.expiration = 0
    const released = this._execute(this.scripts.releaseScript, lock.resources, [lock.value], this._settings(settings), {
      code: 'ERR_LOCK_RELEASE',
      final: true,
    })
    // The release's commands are written: a waiter woken now sends its attempt behind them.
    this._waiting.wake(lock.resources)
    return released
  }

  /**
   * Extends `existing` to `duration` ms from now on every server; resolves a new Lock (the
   * old one's expiration becomes 0). Rejects with an ExecutionError if it had expired or a
   * quorum no longer holds it (not retried: the lock cannot come back).
   */
  async extend(existing, duration, settings) {
    checkDuration(duration)
    if (existing.expiration < Date.now()) {
      throw new ExecutionError('Cannot extend an already-expired lock.', [], 'ERR_LOCK_EXTEND')
    }
    const s = this._settings(settings)
    const { attempts, start } = await this._execute(this.scripts.extendScript, existing.resources, [existing.value, duration], s, {
      code: 'ERR_LOCK_EXTEND',
      final: true,
    })
    existing.expiration = 0
    return new Lock(this, existing.resources, existing.value, attempts, wire.expirationOf(start, duration, s.driftFactor))
  }

  _settings(settings) {
    return settings ? checkSettings({ ...this.settings, ...settings }) : this.settings
  }

  /**
   * Gives back whatever a failed grant left on any server: one round, errors ignored, waited
   * for until a quorum answered (a hung server does not hold up the next attempt).
   */
  async _giveBack(resources, value) {
    await wire.round(this._list, this.scripts.releaseScript, resources, [value], () => null, () => {})
  }

  /**
   * Runs `s` until a round wins a quorum (and, for a grant, still has validity left), at most
   * retryCount + 1 rounds (-1: no limit). Resolves `{ attempts, start }`, `start` being when
   * the winning round was sent. `final`: a quorum of refusals ends it at once.
   */
  async _execute(s, keys, args, settings, { code, validUntil, giveBack, final = false }) {
    const maxAttempts = settings.retryCount === -1 ? Infinity : settings.retryCount + 1
    const attempts = []
    const emit = (err) => this.emit('error', err)
    const refusal = (reply) => new ResourceLockedError(`The operation was applied to: ${reply} of the ${keys.length} requested resources.`)
    for (;;) {
      const r = await wire.round(this._list, s, keys, args, refusal, emit)
      attempts.push(r.stats)
      if (r.vote === 'for' && (validUntil === undefined || validUntil(r.start) > Date.now())) {
        return { attempts, start: r.start }
      }
      if (giveBack !== undefined) await giveBackIfGranted(r, giveBack)
      const hopeless = final && r.refused > this._list.length - wire.quorumOf(this._list.length)
      if (hopeless || attempts.length >= maxAttempts) {
        const err = new ExecutionError('The operation was unable to achieve a quorum during its retry window.', attempts, code)
        if (hopeless) Object.defineProperty(err, GONE, { value: true })
        throw err
      }
      const pause = wire.retryPause(settings.retryDelay, settings.retryJitter)
      await (giveBack !== undefined ? this._waiting.pause(keys, pause) : wire.delay(pause))
    }
  }

  /**
   * Runs `routine(signal)` holding `resources`, extending the lock while it runs; `signal`
   * aborts (with `signal.error`) when an extension fails and the lock is lost. Resolves the
   * routine's value; the lock is released afterwards.
   */
  async using(resources, duration, settingsOrRoutine, optionalRoutine) {
    checkDuration(duration)
    const settings = settingsOrRoutine && typeof settingsOrRoutine !== 'function'
      ? this._settings(settingsOrRoutine)
      : this.settings
    const routine = optionalRoutine ?? settingsOrRoutine
    if (typeof routine !== 'function') {
      const err = new TypeError('The "routine" argument must be of type function')
      err.code = 'ERR_INVALID_ARG_TYPE'
      throw err
    }
    if (settings.automaticExtensionThreshold > duration - 100) {
      const err = new RangeError('A lock `duration` must be at least 100ms greater than the `automaticExtensionThreshold` setting.')
      err.code = 'ERR_OUT_OF_RANGE'
      throw err
    }
    const controller = new AbortController()
    const signal = controller.signal
    let timeout
    let extension
    let lock = await this.acquire(resources, duration, settings)

    const queue = () => {
      timeout = setTimeout(() => { extension = extend() }, Math.max(0, lock.expiration - Date.now() - settings.automaticExtensionThreshold))
    }
    const extend = async () => {
      timeout = undefined
      try {
        lock = await lock.extend(duration)
        queue()
      } catch (error) {
        // Still valid and not refused for good (a server error): try again.
        if (lock.expiration > Date.now() && !refusedForGood(error)) {
          extension = extend()
          return extension
        }
        signal.error = error
        controller.abort(error)
      }
    }
    queue()

    try {
      return await routine(signal)
    } finally {
      if (timeout !== undefined) clearTimeout(timeout)
      if (extension !== undefined) await extension.catch(() => {})
      if (signal.aborted) {
        // The lock is lost: give back what may be left, once, and let the routine's outcome
        // stand (the original waited out every release retry, then threw over it).
        await this.release(lock, { retryCount: 0 }).catch(() => {})
      } else {
        await lock.release()
      }
    }
  }

  /** Shows the settings and the number of servers, never the clients' options. */
  [inspect.custom]() {
    return `Redlock { servers: ${this._list.length}, settings: ${inspect(this.settings)} }`
  }
}

/**
 * Gives back a failed round's partial grant before the next attempt, unless every server
 * refused (the common case under contention: no extra round trip). It is sent before the next
 * attempt's commands, on the same connections, so a server runs it first: a give-back sent
 * after a late vote could delete the next attempt's grant (the value is the same).
 */
async function giveBackIfGranted(r, giveBack) {
  const { votesFor, votesAgainst, membershipSize } = r.live
  if (votesFor.size === 0 && votesAgainst.size === membershipSize) return undefined
  return giveBack()
}

/**
 * Whether an extension failed for good: the lock had expired, or a quorum no longer holds it
 * (a server error, by contrast, may clear up while the lock is still valid).
 */
function refusedForGood(error) {
  return error instanceof ExecutionError && (error.attempts.length === 0 || error[GONE] === true)
}

module.exports = { Redlock, Lock, ExecutionError, ResourceLockedError, defaultSettings }
