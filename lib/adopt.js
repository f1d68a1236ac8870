'use strict'
// Adoption: another client (another process, or this one after a restart) takes over a lock,
// a semaphore's permits or a read-write hold that `owner` holds, keeps its fencing token, and
// from then on extends and releases it as that owner. Built on the store contract as it is:
// the holder is read first (`inspect`, or the semaphore's holders: its token, its permits,
// whether a payload is stored), then the first extension by owner, an atomic compare-and-set
// on every store, proves the owner still holds it. Owners are never reused (a client's random
// prefix and a counter), so the token read belongs to the lease extended.

const v = require('./validate')
const { Lock } = require('./lock')
const observe = require('./observe')
const { own } = v

/** The options `adopt` takes. */
const ADOPT_OPTIONS = new Set(['owner', 'ttl', 'autoExtend', 'extendEvery', 'maxHold', 'onLost'])

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
 * Registers the lease `owner` holds of `key` as a lock of `client` (`permit`: { count, Class,
 * kind } for a semaphore's permits). Resolves with the lock, or null when `owner` no longer
 * holds it. Published on `deadbolt:acquire` as an acquisition with `adopted: true`.
 */
function adoptHeld(client, native, key, owner, o, token, hasData, permit) {
  return new Promise((resolve, reject) => {
    const kind = permit === undefined ? 'lock' : permit.kind
    const trace = observe.acquireStart(client, key, kind, o.ttl, owner, permit === undefined ? 1 : permit.count, true)
    const pending = {
      // A loss reported before the adoption's own completion (see Native#settle).
      lostEarly: null,
      resolve(ok) {
        if (!ok) {
          if (trace !== null) observe.acquireSettled(trace, 'refused', null, null)
          return resolve(null)
        }
        const t = token <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(token) : token
        const lock = permit === undefined
          ? new Lock(client, req, key, owner, t, o.ttl, o.onLost)
          : new permit.Class(client, req, key, owner, t, o.ttl, o.onLost, permit.count)
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
      native.addon.adopt(req, key, owner, permit !== undefined, token, o.ttl, hasData,
        o.autoExtend ? o.extendEvery : 0, o.maxHold === Infinity ? -1 : o.maxHold)
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
  const info = await client.inspect(key)
  if (info === null || info.owner !== owner) return null
  return adoptHeld(client, native, key, owner, o, info.fencingToken ?? 0n, info.data !== null, undefined)
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
  return adoptHeld(client, native, sem.name, owner, o, BigInt(holder.fencingToken), false, { count: holder.permits, Class: sem._Permit, kind })
}

module.exports = { adoptLock, adoptPermits }
