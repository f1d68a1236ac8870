// @ts-check
'use strict'
// The bridge to the addon. Every operation carries a request id made here: acquisitions,
// releases and extensions queued during one tick cross to the addon in one `submit` call, the
// other operations (inspect, list, ping, …) in one call each; completions come back in batches
// through one wake-up per batch (see src/binding), and are settled here. The event loop is
// held open only while requests are pending, so idle clients and background heartbeats never
// keep a process alive.

const { NativeClient, protocol, releaseOnExit } = require('./addon')
const { fromNative, LockClosedError } = require('./errors')
const { scrub } = require('./redact')
const { secretsOfTarget } = require('./topology')
const { HeldLocks } = require('./held-locks')
const { debug } = require('./debug')
const { Requests } = require('./requests')
const observe = require('./observe')
// Node's own timers, not the globals: under jsdom (jest's browser-like environment)
// `setTimeout` is the window's, which returns a number with neither `unref` nor `refresh`,
// and under jest's fake timers the global one would never fire.
const timers = require('timers')

// The operation protocol is defined once, in the addon (src/binding/protocol.rs).
const P = checked(protocol())
const GRANTED = P.kindGranted
const GRANTED_LATE = P.kindGrantedLate
const SUCCEEDED = P.kindSucceeded
const REFUSED = P.kindRefused
const ACQUIRE_LEN = P.acquireLen
// Where each field of a record goes (src/binding/protocol.rs defines the layout once), read
// through the check at load into a plain object (the hot path reads it).
const F = fieldsOf(checked(P.fields), ['dataIndex', 'extendEvery', 'flags', 'heldTtl', 'id', 'jitter', 'keyLen', 'limit', 'maxAttempts', 'maxHold', 'ownerLen', 'ownerSeq', 'permits', 'req', 'retryDelay', 'ttl', 'wait'])
const RELEASE_LEN = P.releaseLen
const EXTEND_LEN = P.extendLen
const LOST = P.kindLost
const INFO = P.kindInfo
const LIST = P.kindList
const PERMIT_LIST = P.kindPermitList
const EXTENDED = P.kindExtended
const LOST_REASONS = P.lostReasons
const OP_ACQUIRE = P.opAcquire
const OP_RELEASE = P.opRelease
const OP_EXTEND = P.opExtend

/**
 * `protocol`, each of whose fields this file reads once, at load (never on a hot path): a field
 * the addon lacks, because it was built from other Rust sources than this lib/ (a clone rebuilt
 * only in part, an old binary copied in), throws ERR_LOCK_NO_BINARY naming it, instead of being
 * read as undefined and misreading records (a late grant taken for a live one). Also wraps the
 * protocol's record layout (`fields`).
 * @template {Record<string, any>} T
 * @param {T} protocol
 * @returns {T}
 */
function checked(protocol) {
  return new Proxy(protocol, {
    get(target, name) {
      const value = target[/** @type {keyof typeof target} */ (name)]
      if (value !== undefined) return value
      const err = new Error(`deadbolt: the native addon was built from other sources than this package's JavaScript (its protocol has no ${String(name)}): rebuild it (npm run build) or reinstall deadbolt`)
      // @ts-ignore: a coded Error, as every error of this package
      err.code = 'ERR_LOCK_NO_BINARY'
      throw err
    },
  })
}

/** The `names` of `fields`, each read once (through `checked`), as a plain frozen object. */
function fieldsOf(fields, names) {
  return Object.freeze(Object.fromEntries(names.map((name) => [name, fields[name]])))
}

let exitHooked = false
/**
 * Releases, when this thread's `process` exits (`process.exit()`, or its event loop emptied),
 * what its clients still hold, waiting up to the addon's bound (1 s) for the store's answers.
 * Without it, `process.exit()` would end the process before any release left it. A listener
 * keeps nothing alive.
 */
function releaseAtExit() {
  if (exitHooked) return
  exitHooked = true
  process.once('exit', releaseOnExit)
}

/** Acquire flags: see `acquireOp`. */
const FLAGS = Object.freeze({
  /** Report the end of a lease nobody extends as a loss. */
  watchExpiry: P.flagWatchExpiry,
  /** Cancellable through `cancel(req)`. */
  cancellable: P.flagCancellable,
  /** Store the bare owner as the value (the redislock wire format). */
  plain: P.flagPlain,
  /** No fencing token wanted (`fencing: false`). */
  unfenced: P.flagUnfenced,
  /** Report each heartbeat extension (someone traces `deadbolt:extend`: lib/observe.js). */
  reportExtensions: P.flagReportExtensions,
})

const SETTLED = Promise.resolve()

/**
 * The client of this thread with operations queued and not yet submitted, if any. When another
 * client queues one, that client's go first: clients of one store share its engine's queue per
 * key (src/core/engine.rs), and acquisitions are granted in the order they reach it, so the
 * order of the calls across the clients of a thread is kept.
 */
let queuing = null

/** Numbers the operations buffer starts with (an acquisition takes ACQUIRE_LEN). */
const OPS_START = 1024
/** Numbers a drain takes in one go (three per completion); a larger batch comes whole. */
const RECORDS_SIZE = 3 * 1024
/** How soon after the last completion an idle client lets go of the event loop. */
const IDLE_CHECK_MS = 1
const NO_EXTRAS = Object.freeze({ errors: [], infos: [], bigTokens: [], lists: [], permitLists: [] })

class Native {
  /**
   * @param {{ url: string, topology?: import('../binding').NativeTopology }} target connect()'s first argument as
   *   `parseTarget` (lib/topology.js) returned it
   * @param {object} [options] connectTimeout, responseTimeout, table, poolSize, tls, dynamodb
   * @param {string[]} [secrets] more strings never to show (credentials from the options)
   */
  constructor(target, options, secrets = []) {
    /** request id → { resolve, reject } (the ids are made here) */
    this.pending = new Requests()
    /** lock handle (its acquisition's request id) → object with `_lost(reason)` */
    this.holders = new HeldLocks()
    this.alive = false
    // Acquire/release/extend calls made during one tick are queued here and submitted to
    // the native side together from a microtask: one crossing and at most one wake-up of
    // the runtime per batch instead of one per call.
    // The numbers of the queued operations, in a buffer reused from batch to batch (grown
    // when a tick queues more), and the completions' records, likewise: neither a submission
    // nor a drain allocates a typed array.
    this.ops = new Float64Array(OPS_START)
    this.opsLen = 0
    this.records = new Float64Array(RECORDS_SIZE)
    this.draining = false
    // The batch's keys (and owners given as strings) one after the other: one string crosses
    // per batch, each record giving its strings' lengths.
    this.text = ''
    this.data = []
    this.opRequests = []
    this.flushQueued = false
    this.flush = () => this.flushOps()
    this.idleCheck = false
    /** The one timer of the idle checks, re-armed by `refresh` (see `drain`). */
    this.idleTimer = null
    this.checkIdle = () => {
      this.idleCheck = false
      if (this.pending.size === 0 && this.alive) {
        this.alive = false
        this.addon.keepAlive(false)
      }
    }
    // What must never appear in an error (a password in the URL): messages from the native
    // side are scrubbed of it, whatever the driver put in them.
    this.secrets = [...new Set([...secretsOfTarget(target), ...secrets])].sort((a, b) => b.length - a.length)
    const topology = target.topology
    try {
      this.addon = new NativeClient(target.url, topology === undefined ? options : { ...options, topology }, () => this.drain())
      releaseAtExit()
    } catch (err) {
      // A bad URL or an unknown scheme: the constructor's error carries deadbolt's code as
      // its `code` (napi's status); anything else napi itself refused is an invalid argument.
      const code = typeof err.code === 'string' && err.code.startsWith('ERR_') ? err.code : 'ERR_INVALID_ARG_VALUE'
      throw Object.assign(new TypeError(scrub(err.message, this.secrets)), { code })
    }
  }

  /** Whether held lock `id` may still be acted on (see NativeClient#isHeld). */
  isHeld(id) {
    return this.addon.isHeld(id)
  }

  /** How many ms held lock `id` may still be acted on (see NativeClient#validFor); 0: none. */
  validFor(id) {
    return this.addon.validFor(id)
  }

  /**
   * Lets go of the native side's wake-up function once `close` completed. Nothing is
   * delivered afterwards, so whatever is still pending is settled here: completions already
   * queued are taken, and the rest (operations the runtime started only after the close had
   * finished) reject with LockClosedError rather than never settle.
   */
  dispose() {
    this.drain()
    if (this.pending.size > 0) {
      const left = this.pending.list()
      this.pending.clear()
      for (const p of left) p.reject(new LockClosedError('The lock client has been closed'))
    }
    if (this.idleTimer !== null) timers.clearTimeout(this.idleTimer)
    if (this.alive) {
      this.alive = false
      this.addon.keepAlive(false)
    }
    this.addon.dispose()
  }

  /** Starts an operation: `start(req)` makes the native call. Resolves with the raw outcome. */
  request(start) {
    return new Promise((resolve, reject) => {
      const req = this.track({ resolve, reject })
      try {
        start(req)
      } catch (err) {
        this.pending.delete(req)
        reject(err)
      }
    })
  }

  /** Releases held lock `id`: resolves true, or false when it was no longer held. */
  release(id) {
    return new Promise((resolve, reject) => {
      this.releaseOp(this.track({ resolve, reject }), id)
    })
  }

  /**
   * Registers `pending` (anything with `resolve(outcome)` and `reject(err)`) under a new
   * request id and returns the id; the caller then makes the native call with it.
   */
  track(pending) {
    const req = this.pending.add(pending)
    if (!this.alive) {
      this.alive = true
      this.addon.keepAlive(true)
    }
    return req
  }

  queueOps() {
    if (queuing !== this) {
      if (queuing !== null) queuing.flushOps()
      queuing = this
    }
    if (!this.flushQueued) {
      this.flushQueued = true
      // A reaction on a settled promise, not `queueMicrotask`: Node's makes an AsyncResource
      // and a bound function per call, which a sequential caller paid at every operation.
      SETTLED.then(this.flush)
    }
  }

  /**
   * Queues an acquisition of `key` for `owner` as request `req` (which becomes the lock's
   * handle). `owner`: a string, or a sequence number whose owner the native side makes from
   * the prefix given to `setOwnerPrefix` (one string fewer to cross). `a`: { ttl, wait (-1: forever), maxAttempts (-1: unlimited), retryDelay, jitter,
   * data (Buffer or undefined), extendEvery (0: no heartbeat), maxHold (-1: none), flags
   * (FLAGS), permits (0: a lock), limit (the semaphore's, with permits) }. The record layout
   * is src/binding/protocol.rs's, through `F`.
   */
  acquireOp(req, key, owner, a) {
    const dataIndex = a.data === undefined ? -1 : this.data.push(a.data) - 1
    const o = this.room(ACQUIRE_LEN)
    const ops = this.ops
    ops[o] = OP_ACQUIRE
    ops[o + F.req] = req
    ops[o + F.ttl] = a.ttl
    ops[o + F.wait] = a.wait
    ops[o + F.maxAttempts] = a.maxAttempts
    ops[o + F.retryDelay] = a.retryDelay
    ops[o + F.jitter] = a.jitter
    ops[o + F.extendEvery] = a.extendEvery
    ops[o + F.maxHold] = a.maxHold
    ops[o + F.flags] = a.flags
    ops[o + F.dataIndex] = dataIndex
    ops[o + F.permits] = a.permits
    ops[o + F.limit] = a.limit
    ops[o + F.keyLen] = key.length
    if (typeof owner === 'number') {
      // The owner prefix (`setOwnerPrefix`) and this number in base 36, made natively.
      ops[o + F.ownerSeq] = owner
      this.text += key
    } else {
      ops[o + F.ownerSeq] = -1
      ops[o + F.ownerLen] = owner.length
      this.text += key + owner
    }
    this.opRequests.push(req)
    this.queueOps()
  }

  releaseOp(req, id) {
    const o = this.room(RELEASE_LEN)
    this.ops[o] = OP_RELEASE
    this.ops[o + F.req] = req
    this.ops[o + F.id] = id
    this.opRequests.push(req)
    this.queueOps()
  }

  extendOp(req, id, ttl) {
    const o = this.room(EXTEND_LEN)
    this.ops[o] = OP_EXTEND
    this.ops[o + F.req] = req
    this.ops[o + F.id] = id
    this.ops[o + F.heldTtl] = ttl
    this.opRequests.push(req)
    this.queueOps()
  }

  /** Makes room for `n` more numbers in the operations buffer; returns where they go. */
  room(n) {
    const at = this.opsLen
    if (at + n > this.ops.length) {
      const bigger = new Float64Array(Math.max(2 * this.ops.length, at + n))
      bigger.set(this.ops.subarray(0, at))
      this.ops = bigger
    }
    this.opsLen = at + n
    return at
  }

  /** Submits the queued operations now. */
  flushOps() {
    this.flushQueued = false
    if (queuing === this) queuing = null
    const len = this.opsLen
    if (len === 0) return
    const { text, data, opRequests } = this
    // The native side reads the whole batch before anything else runs, so the buffer is
    // free again as soon as the call returns.
    this.opsLen = 0
    this.text = ''
    this.data = []
    this.opRequests = []
    try {
      this.addon.submit(this.ops, len, text, data)
    } catch (err) {
      for (const req of opRequests) {
        const p = this.pending.get(req)
        if (p !== undefined) {
          this.pending.delete(req)
          p.reject(err)
        }
      }
    }
  }

  /** Cancels acquisition `req` (submitting queued operations first, so it cannot overtake). */
  cancel(req) {
    this.flushOps()
    this.addon.cancel(req)
  }

  drain() {
    // A loss callback may close the client, which drains again: that inner drain must not
    // overwrite the records this one is still reading.
    const records = this.draining ? new Float64Array(RECORDS_SIZE) : this.records
    const n = this.addon.takeInto(records)
    if (n < 0) {
      const batch = this.addon.take()
      this.settle(batch.records, batch.records.length, batch)
    } else if (this.draining) {
      this.settle(records, n, NO_EXTRAS)
    } else {
      this.draining = true
      try {
        this.settle(records, n, NO_EXTRAS)
      } finally {
        this.draining = false
      }
    }
    // Let go of the event loop only if nothing is pending a moment later: sequential callers
    // then never toggle it at all. The check is an unreferenced timer, re-armed rather than
    // made anew: a `setImmediate` per drain cost every sequential operation an extra,
    // non-blocking turn of the event loop (~5 % of its CPU).
    if (this.pending.size === 0 && this.alive && !this.idleCheck) {
      this.idleCheck = true
      if (this.idleTimer === null) {
        this.idleTimer = timers.setTimeout(this.checkIdle, IDLE_CHECK_MS)
        this.idleTimer.unref()
      } else {
        this.idleTimer.refresh()
      }
    }
  }

  /** Settles the first `n` numbers of `records` (triplets), with the batch's `extras`. */
  settle(records, n, extras) {
    const { errors, infos, bigTokens, lists, permitLists } = extras
    for (let i = 0; i < n; i += 3) {
      const req = records[i]
      const kind = records[i + 1]
      const value = records[i + 2]
      if (kind === LOST) {
        const reason = LOST_REASONS[value] ?? 'not-owned'
        const holder = this.holders.get(req)
        const acquiring = holder ? undefined : this.pending.get(req)
        if (holder) {
          this.holders.delete(req)
          holder._lost(reason)
        } else if (acquiring?.lostEarly !== undefined) {
          // The heartbeat scheduler reported a grant lost (its lease had run out on the way)
          // before the acquisition's own completion was queued: the lock it is about to
          // resolve with is lost from the start.
          acquiring.lostEarly = reason
        } else {
          // A lock nobody here was given (an acquisition that had already failed, been
          // aborted or closed): nobody to tell, and not worth a warning.
          debug('lost', () => `lost report (${reason}) for request ${req}, a lock never handed out`)
        }
        continue
      }
      if (kind === EXTENDED) {
        // A heartbeat extended a lock acquired while someone traced extensions.
        const holder = this.holders.get(req)
        if (holder !== undefined) observe.heartbeat(holder, true)
        continue
      }
      const p = this.pending.get(req)
      if (p === undefined) continue
      this.pending.delete(req)
      switch (kind) {
        case GRANTED:
          // Tokens above 2^53 travel apart, as bigints, so they are never rounded.
          p.resolve(value < 0 ? bigTokens[-value - 1] : value)
          break
        case GRANTED_LATE:
          // Granted, but no longer live when the records were taken (the event loop was
          // stalled past its lease): the native side checked it in this drain's crossing.
          p.resolve(value < 0 ? bigTokens[-value - 1] : value, true)
          break
        case SUCCEEDED:
          p.resolve(true)
          break
        case REFUSED:
          p.resolve(false)
          break
        case INFO:
          p.resolve(infos[value])
          break
        case LIST:
          p.resolve(lists[value])
          break
        case PERMIT_LIST:
          p.resolve(permitLists[value])
          break
        default:
          p.reject(fromNative(errors[value], this.secrets))
      }
    }
  }
}

module.exports = { Native, FLAGS }
