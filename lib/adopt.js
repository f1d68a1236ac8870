'use strict'
// Adoption: another client (another process, or this one after a restart) takes over a lock,
// a semaphore's permits or a read-write hold that `owner` holds, and from then on extends and
// releases it. A lock moves to the adopter's own new owner in one atomic step of the store
// (its handoff: a compare-and-set of the owner that draws a new fencing token), so of two
// adopters only one wins, and the former holder's next extension fails: it hears of its loss
// at its next heartbeat at the latest (in the adopting client, at once). Permits have no such
// step in the store contract: they are taken over under their owner and keep their token (the
// holder is read, then its first extension by owner, an atomic compare-and-set, proves the
// owner still holds them), so their former holder must have stopped extending them.

const v = require('./validate')
const { Lock } = require('./lock')
const observe = require('./observe')
const { own } = v

/** The options `adopt` takes. */
const ADOPT_OPTIONS = new Set(['owner', 'ttl', 'autoExtend', 'extendEvery', 'maxHold', 'onLost', 'fencing'])

/** Validates adopt's options over the client's defaults: `{ owner, o }`. */
function checkAdopt(client, options) {
  if (options === undefined || options === null) throw v.typeError('options', 'an object with an owner', options)
  v.checkObject(options, 'options')
  v.checkKnownKeys(options, ADOPT_OPTIONS, 'options')
  const owner = own(options, 'owner')
  if (typeof owner !== 'string') throw v.typeError('options.owner', 'of type string', owner)
  if (owner.length === 0) throw v.valueError('options.owner', 'must not be empty', owner)
  v.checkWellFormed(owner, 'options.owner')
  const rest = { ...options }
  delete rest.owner
  return { owner, o: client._resolveWith(rest, 0) }
}

/**
 * Takes over the lease `owner` holds of `key` as a lock of `client` (`permit`: { count, Class,
 * kind, token } for a semaphore's permits, which keep `owner` and `token`; a lock moves to a
 * new owner of this client and gets a new token). Resolves with the lock, or null when
 * `owner` no longer holds it. Published on `deadbolt:acquire` as an acquisition with
 * `adopted: true`.
 */
function adoptHeld(client, native, key, owner, o, permit) {
  return new Promise((resolve, reject) => {
    const kind = permit === undefined ? 'lock' : permit.kind
    // A lock's new owner: this client's, as an acquisition's.
    const ownerSeq = permit === undefined ? ++client._owners : owner
    const newOwner = permit === undefined ? client._ownerPrefix + ownerSeq.toString(36) : owner
    const trace = observe.acquireStart(client, key, kind, o.ttl, ownerSeq, permit === undefined ? 1 : permit.count, true)
    const pending = {
      // A loss reported before the adoption's own completion (see Native#settle).
      lostEarly: null,
      resolve(token) {
        if (token === false) {
          if (trace !== null) observe.acquireSettled(trace, 'refused', null, null)
          return resolve(null)
        }
        const lock = permit === undefined
          ? new Lock(client, req, key, ownerSeq, o.fencing === false ? 0 : token, o.ttl, o.onLost)
          : new permit.Class(client, req, key, owner, token, o.ttl, o.onLost, permit.count)
        native.holders.set(req, lock)
        if (trace !== null) observe.acquireSettled(trace, 'granted', lock, null)
        else observe.noteGrant(lock, kind, client._store)
        resolve(lock)
        if (pending.lostEarly !== null) {
          native.holders.delete(req)
          lock._lost(pending.lostEarly)
        }
      },
      reject(err) {
        if (trace !== null) observe.acquireSettled(trace, 'error', null, err)
        reject(err)
      },
    }
    const req = native.track(pending)
    try {
      native.addon.adopt(req, key, owner, newOwner, permit !== undefined, permit === undefined ? 0n : BigInt(permit.token),
        o.fencing !== false, o.ttl, o.autoExtend ? o.extendEvery : 0, o.maxHold === Infinity ? -1 : o.maxHold)
    } catch (err) {
      native.pending.delete(req)
      pending.reject(err)
    } finally {
      if (trace !== null) observe.acquireEnd(trace)
    }
  })
}

/** `LockClient#adopt`: takes over the lock `key` that `options.owner` holds. */
async function adoptLock(client, key, options) {
  v.checkKey(key)
  const { owner, o } = checkAdopt(client, options)
  const native = client._native()
  // Read first, so that an adopt finding no lease of that owner publishes nothing.
  const info = await client.inspect(key)
  if (info === null || info.owner !== owner) return null
  return adoptHeld(client, native, key, owner, o, undefined)
}

/**
 * `Semaphore#adopt` and `ReadWriteLock#adopt`: takes over the permits of semaphore `sem` that
 * `options.owner` holds, as a `Class` (Permit or RwHold). `kindOf(permits)`: what the
 * diagnostics channels call them ('semaphore', or a read-write lock's 'read' or 'write').
 */
async function adoptPermits(sem, options, kindOf) {
  const client = sem._client
  const { owner, o } = checkAdopt(client, options)
  const native = client._native()
  const holder = (await sem.holders()).find((h) => h.owner === owner)
  if (holder === undefined) return null
  const kind = kindOf(holder.permits)
  const token = BigInt(holder.fencingToken)
  const t = token <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(token) : token
  return adoptHeld(client, native, sem.name, owner, o, { count: holder.permits, Class: sem._Permit, kind, token: t })
}

module.exports = { adoptLock, adoptPermits }
