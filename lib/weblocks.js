'use strict'
// The Web Locks API (W3C) across processes: `locks.request(name, [options], callback)` and
// `locks.query()` on every client and store. A web lock named N is the read-write lock N
// (lib/rwlock.js): 'exclusive' is its write hold, 'shared' a read hold, so waiters are served
// in order across processes and a waiting exclusive request is not starved. The lock is held
// (auto-extended) while the promise `callback` returns is pending, and released when it
// settles; `request` settles as it does. A lost hold (stolen, taken by `forceRelease`, or
// not extended in time) rejects `request` with an AbortError whose `cause` is the
// LockLostError, as the specification rejects a stolen request.
//
// `steal` frees the holders the store shows (every process's) and takes the write hold;
// holders in this process hear of it at once, those of other processes at their next
// heartbeat. Requests of the stealing client granted meanwhile give the grant back and wait
// behind the stealer, as the specification prepends a steal to the queue; waiters of other
// clients and processes that the store's queue puts ahead are granted in turn and stolen
// from, until the stealer holds it.
//
// `query()` reads holders across processes: each granted request also holds a marker lock
// `MARKER_PREFIX + owner` (its payload: the name) with the same lease, so the names held
// anywhere can be listed; the store's holders of each name are the answer. Pending requests
// are this process's, for the store the client connects to.

const { inspect } = require('util')
const timers = require('timers')
const v = require('./validate')
const { debug } = require('./debug')
const { abortReason } = require('./pending')
const { ONCE } = require('./options')
const { LockLostError } = require('./errors')
const { own } = v

/** The options `request` takes (the specification's). */
const REQUEST_OPTIONS = new Set(['mode', 'ifAvailable', 'steal', 'signal'])
/** Where the markers that let `query` find held names live (a prefix user keys should avoid). */
const MARKER_PREFIX = '__deadbolt.weblocks/'
/** How a granted hold is kept: auto-extended for as long as the callback runs. */
const HOLD = Object.freeze({ autoExtend: true })
const NOOP = () => {}

/** Web-lock holds of this process by owner: a steal tells a holder of this process at once. */
const localHolds = new Map()
/** Pending requests of this process by store (the client's `where`): Sets of entries. */
const pendingByStore = new Map()
/**
 * Steals under way, by client, then name: Sets of promises that settle once the stealer holds
 * the lock (or has failed). A request of the same client granted meanwhile gives its grant
 * back and waits behind the stealer, as the specification puts a steal at the head of the
 * queue; other clients' and processes' waiters are served by the store's queue.
 */
const stealsByClient = new WeakMap()

/** What the callback gets: the lock's `name` and `mode`, plus `fencingToken` and `signal`. */
class WebLock {
  constructor(name, mode, hold) {
    /** The lock's name. */
    this.name = name
    /** 'exclusive' or 'shared'. */
    this.mode = mode
    Object.defineProperty(this, '_hold', { value: hold })
  }

  /** Strictly increases per name across grants, whatever the mode: pass it to the resource. */
  get fencingToken() {
    return this._hold.fencingToken
  }

  /** Aborted with a LockLostError when the lock is lost (stolen, or not extended in time). */
  get signal() {
    return this._hold.signal
  }

  /**
   * True while the lock is held: false from the lease's local deadline on, even before the
   * loss is reported (a process paused or an event loop stalled past it cannot keep it
   * true). Not in the Web Locks specification, whose locks cannot be lost: check it (or
   * `validUntil`) before acting after a wait, as with a Lock.
   */
  get held() {
    return this._hold.held
  }

  /** Until when this process treats the lock as held, in ms since the epoch (see Lock#validUntil). */
  get validUntil() {
    return this._hold.validUntil
  }

  /** 'Lock', the Web Locks interface's name (Object.prototype.toString shows it). */
  get [Symbol.toStringTag]() {
    return 'Lock'
  }

  toJSON() {
    return { name: this.name, mode: this.mode, fencingToken: String(this.fencingToken) }
  }

  [inspect.custom](depth, options, inspectFn = inspect) {
    return `WebLock ${inspectFn({ name: this.name, mode: this.mode, fencingToken: this.fencingToken }, options)}`
  }
}

function notSupported(message) {
  return new DOMException(message, 'NotSupportedError')
}

/** The AbortError a request rejects with when its lock is lost; `cause`: the LockLostError. */
function lostError(name, cause) {
  const err = new DOMException(`The lock "${name}" was stolen or lost while its callback ran`, 'AbortError')
  Object.defineProperty(err, 'cause', { value: cause, configurable: true, writable: true })
  return err
}

/** Validates `request`'s arguments as the specification orders the checks. */
function checkRequest(name, options, callback) {
  if (typeof options === 'function' && callback === undefined) {
    callback = options
    options = undefined
  }
  v.checkKey(name, 'name')
  v.checkFunction(callback, 'callback')
  let mode = 'exclusive'
  let ifAvailable = false
  let steal = false
  let signal
  if (options !== undefined && options !== null) {
    v.checkObject(options, 'options')
    v.checkKnownKeys(options, REQUEST_OPTIONS, 'options')
    mode = own(options, 'mode') ?? mode
    ifAvailable = own(options, 'ifAvailable') ?? false
    steal = own(options, 'steal') ?? false
    signal = own(options, 'signal')
  }
  if (mode !== 'exclusive' && mode !== 'shared') throw v.valueError('options.mode', "must be 'exclusive' or 'shared'", mode)
  v.checkBoolean(ifAvailable, 'options.ifAvailable')
  v.checkBoolean(steal, 'options.steal')
  if (signal !== undefined) v.checkSignal(signal, 'options.signal')
  // The specification's refusals, with its names.
  if (name.startsWith('-')) throw notSupported('Lock names starting with "-" are reserved')
  if (steal && ifAvailable) throw notSupported('steal and ifAvailable cannot be used together')
  if (steal && mode !== 'exclusive') throw notSupported("steal requires mode 'exclusive'")
  if (signal !== undefined && (steal || ifAvailable)) throw notSupported('signal cannot be used with steal or ifAvailable')
  return { mode, ifAvailable, steal, signal, callback }
}

function pendingOf(client) {
  let set = pendingByStore.get(client._where)
  if (set === undefined) {
    set = new Set()
    pendingByStore.set(client._where, set)
  }
  return set
}

/** `LockClient#request`. */
async function request(client, name, options, callback) {
  const r = checkRequest(name, options, callback)
  if (r.signal?.aborted) throw abortReason(r.signal)
  const rw = client.readWriteLock(name)
  const write = r.mode === 'exclusive'
  const entry = { name, mode: r.mode, clientId: client.clientId }
  const pending = pendingOf(client)
  pending.add(entry)
  let hold
  try {
    if (r.steal) hold = await stealing(client, name, steal(client, rw))
    else {
      for (;;) {
        if (r.ifAvailable) hold = await (write ? rw.tryWrite(HOLD) : rw.tryRead(HOLD))
        else {
          const o = { ...HOLD, wait: Infinity, signal: r.signal }
          hold = await (write ? rw.write(o) : rw.read(o))
        }
        const steals = stealsByClient.get(client)?.get(name)
        if (hold === null || steals === undefined) break
        // Granted while a steal of this process takes the lock: the stealer goes first.
        await hold.release().catch(NOOP)
        hold = null
        if (r.ifAvailable) break
        await untilAborted(Promise.allSettled(steals), r.signal)
      }
    }
  } finally {
    pending.delete(entry)
    if (pending.size === 0) pendingByStore.delete(client._where)
  }
  if (hold === null) return r.callback(null)
  return run(client, name, r.mode, hold, r.callback)
}

/** Runs the callback while `hold` is held; releases it when the callback's promise settles. */
async function run(client, name, mode, hold, callback) {
  const lock = new WebLock(name, mode, hold)
  localHolds.set(hold.owner, hold)
  // Listening from the start: a loss is reported through the request's rejection.
  const signal = hold.signal
  // Taken before the callback runs: once the callback runs, query() in any process shows the
  // hold (a marker taken beside it left a window where a holder, already told so, was not
  // shown). It costs the request one round trip.
  const marker = await client.tryAcquire(MARKER_PREFIX + hold.owner, { ttl: hold.ttl, autoExtend: true, data: name, onLost: NOOP })
    .catch((err) => {
      // query() will not see this hold from other processes; the lock itself is fine.
      debug('weblocks', () => `weblocks ${JSON.stringify(name)}: no query marker (${err.code})`)
      return null
    })
  let onAbort = null
  let outcome
  let failure = null
  try {
    outcome = await new Promise((resolve, reject) => {
      onAbort = () => reject(lostError(name, signal.reason))
      if (signal.aborted) return onAbort()
      signal.addEventListener('abort', onAbort, ONCE)
      Promise.resolve().then(() => callback(lock)).then(resolve, reject)
    })
  } catch (err) {
    failure = { err }
  }
  signal.removeEventListener('abort', onAbort)
  // A lease that ran out while the callback ran (a stalled event loop, extensions unanswered)
  // is a loss even before its report arrives: reported now, it rejects the request as a heard
  // loss would (the report is queued behind the callback's own continuation otherwise).
  const lapsed = signal.aborted ? null : hold._checkLost()
  localHolds.delete(hold.owner)
  const released = await release(name, hold, marker)
  if (lapsed !== null) throw lostError(name, lapsed)
  // Not released because it was no longer held, with no loss heard yet: stolen by another
  // process (or its lease ended) before a heartbeat could tell. The specification rejects a
  // stolen request, whatever its callback did.
  if (!released && !signal.aborted) throw lostError(name, notOwned(hold))
  if (failure !== null) throw failure.err
  return outcome
}

/**
 * Releases `hold` and its query `marker`. Resolves false when the hold was no longer held;
 * true when released, or when the store failed (the lease then lapses by its ttl: no loss
 * was heard).
 */
async function release(name, hold, marker) {
  try {
    const [released] = await Promise.all([hold.release(), marker?.release()])
    return released
  } catch (err) {
    debug('weblocks', () => `weblocks ${JSON.stringify(name)}: release failed (${err.code})`)
    return true
  }
}

/** The LockLostError of `hold`, found taken by another owner when it was released. */
function notOwned(hold) {
  const err = new LockLostError(`Lock on "${hold.key}" was released or taken by another owner`, { reason: 'not-owned' })
  err.key = hold.key
  err.fencingToken = hold.fencingToken
  return err
}

/** Registers `taking`, `client`'s steal of `name`, until it settles; returns it. */
async function stealing(client, name, taking) {
  let byName = stealsByClient.get(client)
  if (byName === undefined) stealsByClient.set(client, (byName = new Map()))
  let steals = byName.get(name)
  if (steals === undefined) byName.set(name, (steals = new Set()))
  steals.add(taking)
  try {
    return await taking
  } finally {
    steals.delete(taking)
    if (steals.size === 0) byName.delete(name)
  }
}

/** Waits for `promise`; rejects with `signal`'s reason if it aborts first. */
function untilAborted(promise, signal) {
  if (signal === undefined) return promise
  if (signal.aborted) return Promise.reject(abortReason(signal))
  let onAbort
  return Promise.race([
    promise,
    new Promise((resolve, reject) => {
      onAbort = () => reject(abortReason(signal))
      signal.addEventListener('abort', onAbort, ONCE)
    }),
  ]).finally(() => signal.removeEventListener('abort', onAbort))
}

/**
 * Takes the write hold of `rw` at once: queued first in this process, it frees every holder
 * the store shows but itself, again after each grant to someone ahead of it, until it holds it.
 */
async function steal(client, rw) {
  // The owner the write acquisition is about to draw (its sequence number is taken
  // synchronously below), so the stealer never evicts itself.
  const mine = client._ownerPrefix + (client._owners + 1).toString(36)
  const taking = rw.write({ ...HOLD, wait: Infinity })
  let done = false
  taking.then(() => { done = true }, () => { done = true })
  const pause = Math.max(1, client._defaults.retryDelay)
  try {
    while (!done) {
      const holders = await rw.holders()
      await Promise.all(holders.filter((h) => h.owner !== mine).map((h) => evict(client, rw.name, h.owner)))
      if (done) break
      // The pause ends early when the write hold comes, and never outlives it (its timer
      // would keep the process alive).
      let timer
      await Promise.race([taking.catch(NOOP), new Promise((resolve) => { timer = timers.setTimeout(resolve, pause) })])
      timers.clearTimeout(timer)
    }
  } catch (err) {
    // The store failed: the request rejects, so a grant still on its way is given back.
    taking.then((hold) => hold.release(), NOOP).catch(NOOP)
    throw err
  }
  return taking
}

/** Frees `owner`'s hold of `name`; a holder in this process hears of it at once. */
async function evict(client, name, owner) {
  const native = client._native()
  await native.request((req) => native.addon.evictPermits(req, name, owner))
  const hold = localHolds.get(owner)
  if (hold !== undefined) {
    localHolds.delete(owner)
    hold._lost('not-owned')
  }
}

/** Where a holder's owner says it comes from: its client's id (see LockClient#clientId). */
function clientIdOf(owner) {
  const dot = owner.indexOf('.')
  return dot < 0 ? owner : owner.slice(0, dot)
}

/** `LockClient#query`: held locks across processes, and this process's pending requests. */
async function query(client) {
  const markers = await client.list(MARKER_PREFIX, { limit: 1_000_000 })
  const names = new Set()
  for (const m of markers) if (typeof m.data === 'string') names.add(m.data)
  const held = []
  await Promise.all([...names].map(async (name) => {
    for (const h of await client.readWriteLock(name).holders()) {
      held.push({ name, mode: h.mode === 'write' ? 'exclusive' : 'shared', clientId: clientIdOf(h.owner) })
    }
  }))
  const pending = [...(pendingByStore.get(client._where) ?? [])].map((e) => ({ ...e }))
  return { held, pending }
}

module.exports = { request, query, WebLock, MARKER_PREFIX }
