// Type definitions for deadbolt: distributed locks for Node.js (Rust core).
// Three faces: the modern API (connect → LockClient), the redislock 1.3 face and the
// sql-lock face. Every error carries a stable `code`.

/**
 * The main entry point: `connect()` and the `LockClient` it returns, the errors, and the
 * redislock and sql-lock faces' functions (also exported from their own entry points).
 *
 * @packageDocumentation
 * @module deadbolt
 */

/// <reference types="node" />

// ───────────────────────────── errors ─────────────────────────────

/** Base class of deadbolt's lock errors. */
export declare class LockError extends Error {
  constructor(message?: string, options?: { cause?: unknown })
  readonly code: string
  /** What `JSON.stringify` shows: name, code, message, the error's own fields and its cause. */
  toJSON(): LockErrorJSON
}
/**
 * `JSON.stringify` of a deadbolt error, parsed back: never a stack or a secret. Fields of the
 * error's own (a LockLostError's `reason`, a DLMError's `err_type`…) come along, a bigint as
 * its decimal string; `cause` is the cause's the same way (a string, number or boolean cause
 * as it is).
 */
export interface LockErrorJSON {
  name: string
  code: string | undefined
  message: string
  cause?: LockErrorJSON | string | number | boolean
  [field: string]: unknown
}
/** The lock was held by someone else when the wait or the retries ran out. */
export declare class LockAcquisitionError extends LockError {
  readonly code: 'ERR_LOCK_ACQUISITION'
}
/** Release of a lock that was not held, had expired or was taken. */
export declare class LockReleaseError extends LockError {
  readonly code: 'ERR_LOCK_RELEASE'
}
/** Extension of a lock that is no longer held (expired or taken). */
export declare class LockExtendError extends LockError {
  readonly code: 'ERR_LOCK_EXTEND'
}
/** Why a lock was lost. */
export type LostReason = 'not-owned' | 'expired' | 'unreachable' | 'max-hold'
/** A held lock was lost: found gone or taken, its lease lapsed, or maxHold was reached. */
export declare class LockLostError extends LockError {
  readonly code: 'ERR_LOCK_LOST'
  readonly reason: LostReason
  readonly key: string
  /** The lost lock's fencing token; null for a lock taken without one (`fencing: false`). */
  readonly fencingToken: bigint | null
  /** Set when the loss has a cause of its own: the SQLite file was deleted or replaced. */
  readonly cause?: Error & { code: 'ERR_LOCK_STORE_REPLACED' }
  /** What `JSON.stringify` shows: the token as a decimal string. */
  toJSON(): LockLostErrorJSON
}
/** `JSON.stringify` of a LockLostError, parsed back. */
export interface LockLostErrorJSON extends LockErrorJSON {
  name: 'LockLostError'
  code: 'ERR_LOCK_LOST'
  message: string
  reason: LostReason
  key: string
  /** The lost lock's fencing token as a decimal string (null for a lock taken without one). */
  fencingToken: string | null
  /** The cause's JSON, when the loss has a cause of its own. */
  cause?: LockErrorJSON
}
/** What kind of store failure a LockBackendError's `cause` reports. */
export type StoreErrorCode =
  | 'ERR_LOCK_STORE_UNREACHABLE'
  | 'ERR_LOCK_STORE_TIMEOUT'
  | 'ERR_LOCK_STORE_CLOSED'
  | 'ERR_LOCK_STORE_SERVER'
  | 'ERR_LOCK_STORE_AUTH'
  | 'ERR_LOCK_STORE_NO_DATABASE'
  | 'ERR_LOCK_STORE_UNSUPPORTED'
  | 'ERR_LOCK_STORE_INVALID'
  | 'ERR_LOCK_STORE_INTERNAL'
  | 'ERR_LOCK_STORE_REPLACED'
  | 'ERR_LOCK_STORE_WRONG_TYPE'
  | 'ERR_LOCK_STORE_PROTOCOL'
/** The store failed or could not be reached; `cause.code` says how, `cause.message` what. */
export declare class LockBackendError extends LockError {
  readonly code: 'ERR_LOCK_BACKEND'
  readonly cause: Error & { code: StoreErrorCode }
}
/** The client was closed. */
export declare class LockClosedError extends LockError {
  readonly code: 'ERR_LOCK_CLOSED'
}
/** An AbortSignal without a reason of its own fired. */
export declare class LockAbortedError extends LockError {
  readonly code: 'ERR_LOCK_ABORTED'
}
/** `assertLocked()` found no job lock held: outside a job, or its lock was lost (`cause`). */
export declare class LockNotHeldError extends LockError {
  readonly code: 'ERR_LOCK_NOT_HELD'
}

// ───────────────────────────── modern API ─────────────────────────────

/** A payload stored with a lock: read back by `inspect` as the same type. */
export type LockData = string | Buffer | Uint8Array

export interface ConnectOptions {
  /** Default lease for acquisitions, in ms. Default 10 000. */
  ttl?: number
  /** Default base delay between polls while waiting, in ms. Default 50. */
  retryDelay?: number
  /** Default relative jitter of the poll delay, 0..1. Default 0.5 (±50 %). */
  jitter?: number
  /** Bound on opening a connection, in ms (an integer from 1 to 2^31-1). Default 5 000. */
  connectTimeout?: number
  /**
   * Bound on waiting for the store's answer to one call, in ms (an integer from 1 to 2^31-1):
   * a Redis command, a SQL statement, an HTTP request to DynamoDB or etcd. With
   * `connectTimeout` it bounds every call, also with the server stopped. Default 5 000.
   */
  responseTimeout?: number
  /**
   * MySQL, PostgreSQL, SQLite: the lease table, created on first use (PostgreSQL: at most 57
   * characters, with a sequence `<table>_fence`). Default `deadbolt_locks`.
   */
  table?: string
  /** MySQL, PostgreSQL: connection pool size, an integer from 1 to 1 000. Default 10. */
  poolSize?: number
  /** Do not check that the store answers before resolving. Default false. */
  lazy?: boolean
  /**
   * This client's name, shown as the holder of what it holds (`inspect`, `list`, `holders`,
   * `leader`, the CLI): 1 to 64 letters, digits, `_` or `-`. Default none. Checked, but
   * written nowhere, with `identity: false`.
   */
  name?: string
  /**
   * Write the holder's identity (host name, pid, `name`) into every owner token, so others can
   * tell who holds a lock. Default true; false writes a bare random owner.
   */
  identity?: boolean
  /**
   * TLS for `rediss://`, `mysql://`/`mariadb://`, `postgres://`/`postgresql://` and `etcds://`
   * (a TypeError for other URLs): trust a private CA, present a client certificate. Checked
   * before any I/O; the material is never printed in errors, `util.inspect` or JSON.
   */
  tls?: TlsOptions
  /**
   * DynamoDB (`dynamodb://<table>?region=…`; a TypeError for other URLs): create the table on
   * first use if it does not exist, with on-demand billing and the key schema below. Default
   * false.
   */
  createTable?: boolean
  /** DynamoDB: the partition key attribute (type S). Default `key`, as the Java lock client. */
  partitionKey?: string
  /**
   * DynamoDB: the table's sort key attribute (type S) and the value every lock of this client
   * uses: the lock named `k` is the item (`k`, `value`). Default: the table has none.
   */
  sortKey?: { name: string; value: string }
  /**
   * DynamoDB: delete the item on release (the Java client's default) instead of marking it
   * released (`isReleased`), which keeps its fencing counter. Default false.
   */
  deleteOnRelease?: boolean
  /**
   * DynamoDB: the credentials to sign with, instead of those of the environment
   * (`AWS_ACCESS_KEY_ID`, …) or of the shared files (`AWS_PROFILE`). Never printed in errors,
   * `util.inspect` or JSON.
   */
  credentials?: AwsCredentials
}

/** Static AWS credentials (an access key, or temporary credentials with their session token). */
export interface AwsCredentials {
  accessKeyId: string
  secretAccessKey: string
  sessionToken?: string
}

/** PEM text, as a string or bytes. */
export type Pem = string | Buffer | Uint8Array

/** TLS settings, as Node's `tls.connect` takes them (the subset deadbolt supports). */
export interface TlsOptions {
  /**
   * CA certificates (PEM; one value or an array, each may hold several) that the server's
   * certificate must chain to, instead of the built-in public roots. For MySQL, giving `tls`
   * makes the connection verify the server (`ssl-mode=verify_identity`) unless the URL's
   * `?ssl-mode=verify_ca` asks to skip the name check; for PostgreSQL, `sslmode=verify-full`
   * unless the URL's `?sslmode=verify-ca` asks to skip it.
   */
  ca?: Pem | Pem[]
  /** Client certificate chain (PEM) for mutual TLS; needs `key`. */
  cert?: Pem
  /** Unencrypted private key (PEM: PKCS#8, PKCS#1 or SEC1) of `cert`. Passphrases are not supported. */
  key?: Pem
  /**
   * Name the server's certificate must carry. Both drivers verify the URL's host only, so a
   * different name is a TypeError: put the name in the URL instead.
   */
  servername?: string
  /** Verify the server's certificate. Default true; false encrypts without verifying. */
  rejectUnauthorized?: boolean
}

/**
 * Options of `acquire`, `tryAcquire` and `withLock`. Like every options object in deadbolt, it
 * is read from its own enumerable properties: nothing inherited from Object.prototype counts.
 */
export interface AcquireOptions {
  /**
   * Lease length in ms, an integer from 1 to 2^31-1 (at least 2 with autoExtend). Default
   * 10 000 (or the client's `ttl`).
   */
  ttl?: number
  /**
   * Total time to wait for the lock, in ms: 0 to 2^31-1 (fractions allowed), or `Infinity` to
   * wait forever. Default 10 000 for `acquire` and `withLock`, 0 for `tryAcquire`.
   */
  wait?: number
  /** Base delay between polls, in ms. Default 50. Waiters are also woken by releases. */
  retryDelay?: number
  /** Relative jitter of the poll delay, 0..1. Default 0.5. */
  jitter?: number
  /** Keep the lease alive with a background heartbeat. Default false (true in withLock). */
  autoExtend?: boolean
  /** Heartbeat period in ms, an integer less than ttl. Default ttl / 3. */
  extendEvery?: number
  /**
   * With autoExtend: after this many ms the heartbeat stops and the lock is given up (lost
   * with reason 'max-hold' and released). Bounds how long a stuck event loop can keep a lock
   * alive through the native heartbeat. 0 to 2^31-1, or Infinity (the default); more than 0
   * with autoExtend.
   */
  maxHold?: number
  /** Payload stored with the lock (at most 1 MiB; a string must have no lone surrogates). */
  data?: LockData
  /** Cancels the wait: the acquisition rejects with the signal's reason and leaves no lock. */
  signal?: AbortSignal
  /**
   * Called once if the lock is lost (after `signal` was aborted). An exception it throws is
   * rethrown as an uncaught exception, as one thrown by an event listener would be.
   */
  onLost?: (err: LockLostError) => void
  /**
   * Opt-in reentrancy within this client: if the client already holds `key` through a
   * reentrant acquisition, resolve at once with another hold on the same lock (same lease,
   * fencing token, heartbeat and data) instead of waiting for itself. The lock is released
   * when its last hold is released. A nested hold's own options only bound its wait and add
   * its `onLost`. Default false. A hold that needs a token (`fencing` true) cannot join a
   * lock this client took with `fencing: false` (a TypeError says so).
   */
  reentrant?: boolean
  /**
   * false: the lock needs no fencing token, and its `fencingToken` is null. On Redis the
   * uncontended acquisition is then one top-level `SET key value NX PX ttl` instead of a
   * script that draws a token; a refused one still runs the script, which marks the holder's
   * value so that its release wakes the waiter. Redlock and the other stores draw a token all
   * the same and do not show it. Default true.
   */
  fencing?: boolean
}

/** `AcquireOptions` with `fencing: false`: the lock comes without a fencing token. */
export type UnfencedOptions = AcquireOptions & { fencing: false }

/**
 * Who holds a lock, permit or leadership: written by the holding client into its owner token
 * (on every store, beside the lock, outside the payload) unless it connected with
 * `identity: false`.
 */
export interface Holder {
  /** The holding process's host name (`os.hostname()`, at most 80 bytes once encoded). */
  host: string
  /** The holding process's pid. */
  pid: number
  /** The `name` the holding client connected with, or null. */
  name: string | null
}

/**
 * Who holds a lock. `JSON.stringify` works on it (its `toJSON`, not enumerable, writes the
 * token as a decimal string: JSON has no bigint).
 */
export interface LockInfo {
  key: string
  /** Owner token of the holder (the value stored in the store). */
  owner: string
  /** Who holds it: host, pid and client name, read from the owner token; null for an owner written without identity (`identity: false`, another library, a drop-in face). */
  holder: Holder | null
  /**
   * The holder's fencing token; null when the store cannot tell (a Redis lock taken in the
   * redislock wire format, by redislock or deadbolt's redislock face).
   */
  fencingToken: bigint | null
  /** Remaining lease in ms, by the store's clock. */
  remainingMs: number
  /** The payload stored with the lock, or null. */
  data: string | Buffer | null
  toJSON(): LockInfoJSON
}

/** `JSON.stringify` of a LockInfo, parsed back. */
export interface LockInfoJSON {
  key: string
  owner: string
  holder: Holder | null
  /** The holder's fencing token as a decimal string (exact beyond 2^53: `BigInt(s)`), or null. */
  fencingToken: string | null
  remainingMs: number
  /** A string payload as it is; a Buffer as Node writes one (`{ type: 'Buffer', data: [...] }`). */
  data: string | { type: 'Buffer'; data: number[] } | null
}

/** `JSON.stringify` of a Lock, parsed back: no client, no handle, the token as a string. */
export interface LockJSON {
  key: string
  owner: string
  /** The fencing token as a decimal string, or null for a lock taken with `fencing: false`. */
  fencingToken: string | null
  ttl: number
  held: boolean
}
/** `JSON.stringify` of a Permit, parsed back. */
export interface PermitJSON extends LockJSON {
  permits: number
}
/** `JSON.stringify` of a RwHold, parsed back (its mode instead of a count of permits). */
export interface RwHoldJSON extends LockJSON {
  mode: 'read' | 'write'
}
/** What `toJSON()` of a Lock, a Permit or a RwHold returns. */
export type HeldJSON<T> = T extends RwHold ? RwHoldJSON : T extends Permit ? PermitJSON : LockJSON

/** A held lock. */
export declare class Lock implements AsyncDisposable {
  readonly key: string
  /** Owner token (the value stored under the key). */
  readonly owner: string
  /** Strictly increases per key across acquisitions: pass it to the resource you protect. */
  readonly fencingToken: bigint
  /** Current lease length in ms. */
  readonly ttl: number
  /**
   * True until released or lost. Turns false at the lease's local deadline (the send time of
   * the request that granted or last extended it, plus the ttl) even before the loss is
   * reported: a stalled event loop or an extension still in flight cannot keep it true.
   */
  readonly held: boolean
  /**
   * Until when this process treats the lock as held, in ms since the epoch (like
   * `Date.now()`): the local deadline `held` is measured against (the send time of the request
   * that granted or last extended it, plus the ttl, less 1 % + 2 ms), or the end of `maxHold`
   * if sooner; null once released, lost or past it. On Redlock it is the algorithm's validity.
   */
  readonly validUntil: number | null
  /** Aborted with a LockLostError when the lock is lost. */
  readonly signal: AbortSignal
  /** Sets the remaining lease to `ttl` ms; rejects with LockExtendError if no longer held. */
  extend(ttl?: number): Promise<void>
  /**
   * Stops extending the lock for good, without releasing it (closing the client leaves it
   * too): its lease lapses at its end, when `held` turns false and `signal` aborts with a
   * LockLostError of reason `expired` (no process warning), unless it is released first or
   * another client adopts it (`adopt` with this lock's `owner`). `maxHold` no longer
   * applies. False when it was not held.
   */
  stopExtending(): boolean
  /** Idempotent: true if this call released it, false if it was already released, expired or taken. */
  release(): Promise<boolean>
  /** Releases the lock (`await using`). */
  [Symbol.asyncDispose](): Promise<void>
  /** What `JSON.stringify` shows (the token as a decimal string: JSON has no bigint). */
  toJSON(): HeldJSON<this>
}

/**
 * What `adopt` takes: the `owner` whose lease is taken over (a held lock's `owner`), and how
 * it is kept from then on, as `acquire` keeps a lock (`fencing: false`: a lock adopted
 * without a fencing token).
 */
export interface AdoptOptions extends Pick<AcquireOptions, 'ttl' | 'autoExtend' | 'extendEvery' | 'maxHold' | 'onLost' | 'fencing'> {
  /** The owner token the lease is held under. */
  owner: string
}

/** The Web Locks API's modes: the write and read holds of the read-write lock of that name. */
export type WebLockMode = 'exclusive' | 'shared'

/** What `LockClient#request` takes: the Web Locks API's options. */
export interface WebLockOptions {
  /** Default 'exclusive'. */
  mode?: WebLockMode
  /** Call back with null instead of waiting when the lock cannot be granted at once. */
  ifAvailable?: boolean
  /**
   * Take the lock at once from whoever holds it, in any process: their `signal` aborts and
   * their `request` rejects with an AbortError. Exclusive only.
   */
  steal?: boolean
  /** Aborts the wait (not a granted lock): `request` rejects with the signal's reason. */
  signal?: AbortSignal
}

/** The lock a `request` callback gets. */
export declare class WebLock {
  readonly name: string
  readonly mode: WebLockMode
  /** Strictly increases per name from grant to grant, whatever the mode. */
  readonly fencingToken: bigint
  /** Aborted with a LockLostError when the lock is lost (stolen, or not extended in time). */
  readonly signal: AbortSignal
  /**
   * True while the lock is held: false from the lease's local deadline on, even before the
   * loss is reported (a process paused or an event loop stalled past it cannot keep it
   * true). Not in the Web Locks specification, whose locks cannot be lost.
   */
  readonly held: boolean
  /** Until when this process treats the lock as held, in ms since the epoch (see `Lock#validUntil`). */
  readonly validUntil: number | null
  /** 'Lock', as the Web Locks interface's objects say through Object.prototype.toString. */
  readonly [Symbol.toStringTag]: 'Lock'
  toJSON(): { name: string; mode: WebLockMode; fencingToken: string }
}

/** One lock in `query()`'s answer. */
export interface WebLockInfo {
  name: string
  mode: WebLockMode
  /** The holding or requesting client's id (`LockClient#clientId`). */
  clientId: string
}

/** What `LockClient#query` resolves with. */
export interface WebLockSnapshot {
  /** Held locks, every process's, as the store shows them. */
  held: WebLockInfo[]
  /** Requests waiting in this process (clients of the same store). */
  pending: WebLockInfo[]
}

/** A lock taken with `fencing: false`: a Lock whose `fencingToken` is null. */
export interface UnfencedLock extends Omit<Lock, 'fencingToken'> {
  readonly fencingToken: null
}

/** Several locks held together: obtain one from `LockClient#acquireAll`. */
export declare class MultiLock<L extends Lock | UnfencedLock = Lock> implements AsyncDisposable {
  /** The keys, in the order they were given. */
  readonly keys: string[]
  /** One lock per key, in the same order (each with its own fencing token, or none). */
  readonly locks: L[]
  /** True while every lock is held. */
  readonly held: boolean
  /** Aborted with the first LockLostError when any of the locks is lost. */
  readonly signal: AbortSignal
  /** Sets the remaining lease of every lock; rejects with the first LockExtendError. */
  extend(ttl?: number): Promise<void>
  /** Releases every lock; true if this call released them all. */
  release(): Promise<boolean>
  /** Releases every lock (`await using`). */
  [Symbol.asyncDispose](): Promise<void>
  /** What `JSON.stringify` shows: the keys, whether all are held, and each lock's JSON. */
  toJSON(): MultiLockJSON
}

/** `JSON.stringify` of a MultiLock, parsed back. */
export interface MultiLockJSON {
  keys: string[]
  held: boolean
  locks: LockJSON[]
}

/** Options of `Semaphore#acquire` / `tryAcquire` / `withPermit`: those of `acquire` but `data` and `reentrant`. */
export interface PermitOptions extends Omit<AcquireOptions, 'data' | 'reentrant' | 'fencing'> {
  /** How many permits to take, all or none: from 1 to the semaphore's limit. Default 1. */
  permits?: number
}

/** Options of a read-write lock's `read` / `write` / `tryRead` / `tryWrite`. */
export type RwOptions = Omit<AcquireOptions, 'data' | 'reentrant' | 'fencing'>

/** Permits of a semaphore, held: a Lock whose `key` is the semaphore's name. */
export declare class Permit extends Lock {
  /** How many permits this holds. */
  readonly permits: number
  /** The semaphore's name (the same as `key`). */
  readonly semaphore: string
}

/** A holder of a semaphore's permits, as the store reports it. */
export interface PermitHolder {
  /** Owner token of the acquisition. */
  owner: string
  /** Who holds it: host, pid and client name, read from the owner token; null for an owner written without identity (`identity: false`, another library, a drop-in face). */
  holder: Holder | null
  /** How many permits it holds. */
  permits: number
  /** Its fencing token. */
  fencingToken: bigint
  /** Remaining lease in ms, by the store's clock. */
  remainingMs: number
  /** What `JSON.stringify` shows (not enumerable): the token as a decimal string. */
  toJSON(): PermitHolderJSON
}

/** `JSON.stringify` of a PermitHolder, parsed back. */
export interface PermitHolderJSON {
  owner: string
  holder: Holder | null
  permits: number
  /** The fencing token as a decimal string. */
  fencingToken: string
  remainingMs: number
}

/**
 * A counting semaphore: at most `limit` permits held at once, by every process. Waiters are
 * served in order, and nobody overtakes a waiter it would delay. Obtain one from
 * `LockClient#semaphore`.
 */
export declare class Semaphore {
  readonly name: string
  readonly limit: number
  /** Takes `permits` (default 1), all or none, waiting up to `wait` ms; rejects with LockAcquisitionError. */
  acquire(options?: PermitOptions): Promise<Permit>
  /** Takes the permits if free now (no wait by default); null otherwise. */
  tryAcquire(options?: PermitOptions): Promise<Permit | null>
  /** Runs `fn` holding the permits (auto-extended) and releases them; like `withLock`. */
  withPermit<T>(fn: (permit: Permit) => T | Promise<T>): Promise<T>
  withPermit<T>(options: PermitOptions, fn: (permit: Permit) => T | Promise<T>): Promise<T>
  /** How many permits are taken now, read from the store. */
  permits(): Promise<number>
  /** The live holders, read from the store. */
  holders(): Promise<PermitHolder[]>
  /**
   * Takes over the permits `options.owner` holds (a Permit's `owner`), keeping their owner,
   * token and count; null when that owner holds none. Unlike a lock's, their former holder
   * must have stopped extending them (`stopExtending`). See `LockClient#adopt`.
   */
  adopt(options: AdoptOptions): Promise<Permit | null>
  toJSON(): { name: string; limit: number }
}

/** A read or the write hold of a read-write lock. */
export declare class RwHold extends Permit {
  readonly mode: 'read' | 'write'
}

/** A holder of a read-write lock, as the store reports it. */
export interface RwHolder {
  owner: string
  /** Who holds it: host, pid and client name, read from the owner token; null for an owner written without identity (`identity: false`, another library, a drop-in face). */
  holder: Holder | null
  mode: 'read' | 'write'
  fencingToken: bigint
  remainingMs: number
  /** What `JSON.stringify` shows (not enumerable): the token as a decimal string. */
  toJSON(): RwHolderJSON
}

/** `JSON.stringify` of a RwHolder, parsed back. */
export interface RwHolderJSON {
  owner: string
  holder: Holder | null
  /** The fencing token as a decimal string. */
  fencingToken: string
  remainingMs: number
  mode: 'read' | 'write'
}

/**
 * Many readers or one writer, across processes. A waiting writer holds back readers that come
 * after it; reads and writes draw fencing tokens from one sequence. Obtain one from
 * `LockClient#readWriteLock`.
 */
export declare class ReadWriteLock {
  readonly name: string
  /** A read hold, waiting up to `wait` ms; rejects with LockAcquisitionError. */
  read(options?: RwOptions): Promise<RwHold>
  /** The write hold, waiting up to `wait` ms; rejects with LockAcquisitionError. */
  write(options?: RwOptions): Promise<RwHold>
  /** A read hold if no writer holds or waits (no wait by default); null otherwise. */
  tryRead(options?: RwOptions): Promise<RwHold | null>
  /** The write hold if nobody holds or waits (no wait by default); null otherwise. */
  tryWrite(options?: RwOptions): Promise<RwHold | null>
  withRead<T>(fn: (hold: RwHold) => T | Promise<T>): Promise<T>
  withRead<T>(options: RwOptions, fn: (hold: RwHold) => T | Promise<T>): Promise<T>
  withWrite<T>(fn: (hold: RwHold) => T | Promise<T>): Promise<T>
  withWrite<T>(options: RwOptions, fn: (hold: RwHold) => T | Promise<T>): Promise<T>
  /** The live holders, read from the store. */
  holders(): Promise<RwHolder[]>
  /**
   * Takes over the read or write hold `options.owner` holds, keeping its token and mode; null
   * when that owner holds none. See `LockClient#adopt`.
   */
  adopt(options: AdoptOptions): Promise<RwHold | null>
  toJSON(): { name: string }
}

export interface ElectOptions {
  /** Leadership lease in ms, an integer from 2 to 2^31-1. Default 5 000. */
  ttl?: number
  /** Stored with the leadership lock, e.g. the host name. */
  data?: LockData
  /** Poll delay while a follower, in ms. Default: the client's retryDelay. */
  retryDelay?: number
  /** Called when this candidate becomes leader. */
  onElected?: (lock: Lock) => void | Promise<void>
  /** Called when leadership is lost (not on resign). */
  onRevoked?: (err: LockLostError) => void
  /** Aborting it resigns. */
  signal?: AbortSignal
}

/** A campaign for leadership of one name. */
export declare class Election implements AsyncDisposable {
  readonly name: string
  readonly isLeader: boolean
  /** The leadership lock's fencing token (the term), or null when not leader. */
  readonly term: bigint | null
  /** Stops campaigning and gives up leadership. */
  resign(): Promise<void>
  [Symbol.asyncDispose](): Promise<void>
  /** What `JSON.stringify` shows: no client, no callback, the term as a decimal string. */
  toJSON(): ElectionJSON
}

/** `JSON.stringify` of an Election, parsed back. */
export interface ElectionJSON {
  name: string
  isLeader: boolean
  /** The term as a decimal string, or null when not leader. */
  term: string | null
}

/** Counters from `LockClient#stats()`. */
export interface LockClientStats {
  /** Locks this client holds. */
  held: number
  /** Acquisitions queued in this process for this store (all clients of it). */
  waiting: number
  /** Leases the heartbeat scheduler looks after (all clients of this store). */
  scheduled: number
  /** Redis release channels this process listens to. */
  subscriptions: number
  /** Grants whose reply came too late, being given back in the background (this store). */
  cleanups: number
}

/** A connection to one lock store. */
export declare class LockClient implements AsyncDisposable {
  /** Acquires `key`, waiting up to `wait` ms; rejects with LockAcquisitionError if still busy. */
  acquire(key: string, options: UnfencedOptions): Promise<UnfencedLock>
  acquire(key: string, options?: AcquireOptions): Promise<Lock>
  /**
   * Acquires every key (at most 1 000, distinct), holding all or none: keys are taken in one
   * order every process agrees on, so acquireAll calls over overlapping sets never deadlock.
   * `options.wait` bounds the whole set; `onLost` is called once, for the first lock lost.
   * Rejects, holding none, with the error that stopped it (LockAcquisitionError when a key
   * stayed busy). `reentrant` is not supported here.
   */
  acquireAll(keys: readonly string[], options: UnfencedOptions): Promise<MultiLock<UnfencedLock>>
  acquireAll(keys: readonly string[], options?: AcquireOptions): Promise<MultiLock>
  /** Acquires `key` if free (no wait by default); resolves null when busy. */
  tryAcquire(key: string, options: UnfencedOptions): Promise<UnfencedLock | null>
  tryAcquire(key: string, options?: AcquireOptions): Promise<Lock | null>
  /**
   * A counting semaphore of `options.limit` permits (at most 1 000 000 000) named `name`;
   * every process must give it the same limit. It lives apart from the lock of the same name,
   * but a read-write lock is a semaphore: do not give a semaphore and a read-write lock one name.
   */
  semaphore(name: string, options: { limit: number }): Semaphore
  /** A read-write lock named `name`: many readers or one writer. */
  readWriteLock(name: string): ReadWriteLock
  /**
   * Runs `fn` holding `key` (auto-extended), releases afterwards. Rejects with fn's error, or
   * with the LockLostError if the lock was lost while fn ran.
   */
  withLock<T>(key: string, fn: (lock: Lock) => T | Promise<T>): Promise<T>
  withLock<T>(key: string, options: UnfencedOptions, fn: (lock: UnfencedLock) => T | Promise<T>): Promise<T>
  withLock<T>(key: string, options: AcquireOptions, fn: (lock: Lock) => T | Promise<T>): Promise<T>
  /**
   * Takes over the lock `key` that `options.owner` holds (another process's, or this one's
   * before a restart: see `Lock#stopExtending`): in one atomic step of the store it moves to
   * a new owner of this client, with a new, higher fencing token and its payload, and is
   * extended and released by this client from then on. Of concurrent adopters one wins; the
   * former holder hears of its loss at its next renewal at the latest (in this client, at
   * once). Null when that owner no longer holds it (or another adopter took it first).
   */
  adopt(key: string, options: AdoptOptions & { fencing: false }): Promise<UnfencedLock | null>
  adopt(key: string, options: AdoptOptions): Promise<Lock | null>
  /**
   * The Web Locks API's `request`, across processes: runs `callback` while holding the lock
   * `name` (auto-extended) and resolves with its result once its promise settles, which
   * releases the lock. `shared` and `exclusive` are the read and write holds of the
   * read-write lock `name`. Rejects with `callback`'s error; with an AbortError (`cause`: the
   * LockLostError) when the lock is stolen or lost meanwhile (a lease past its local deadline
   * when the callback settles counts, reported or not); with the signal's reason when
   * `signal` aborts the wait; with a NotSupportedError DOMException for the combinations the
   * specification refuses and names starting with `-`.
   */
  request<T>(name: string, callback: (lock: WebLock) => T | PromiseLike<T>): Promise<Awaited<T>>
  request<T>(name: string, options: WebLockOptions & { ifAvailable: true }, callback: (lock: WebLock | null) => T | PromiseLike<T>): Promise<Awaited<T>>
  request<T>(name: string, options: WebLockOptions & { ifAvailable?: false }, callback: (lock: WebLock) => T | PromiseLike<T>): Promise<Awaited<T>>
  request<T>(name: string, options: WebLockOptions, callback: (lock: WebLock | null) => T | PromiseLike<T>): Promise<Awaited<T>>
  /**
   * The Web Locks API's `query`: the locks held by every process (as the store shows them)
   * and the requests waiting in this process.
   */
  query(): Promise<WebLockSnapshot>
  /** This client's id in `query()`'s answers: the start of every owner it makes. */
  readonly clientId: string
  /** Who holds `key`, or null. */
  inspect(key: string): Promise<LockInfo | null>
  /**
   * Frees `key` whoever holds it (an operator's tool); true if a live lock was freed. Its
   * holder hears of it (`not-owned`) at its next extension.
   */
  forceRelease(key: string): Promise<boolean>
  /**
   * Held locks whose names start with `prefix` (default: all), at most `options.limit`
   * (default 1 000). On Redis every key with an expiry under the prefix is listed.
   */
  list(prefix?: string, options?: { limit?: number }): Promise<LockInfo[]>
  /** Campaigns for leadership of `name`. */
  elect(name: string, options?: ElectOptions): Election
  /** The current leader of `name`, or null. */
  leader(name: string): Promise<LockInfo | null>
  /** Resolves when the store answers. */
  ping(): Promise<void>
  /** Locks this client holds. */
  readonly heldCount: number
  /** What this client and its store's engine keep right now (diagnostics). */
  stats(): LockClientStats
  /**
   * Stops heartbeats, cancels waits and releases held locks; later calls reject with
   * ERR_LOCK_CLOSED. Idempotent. The connection is shared with other clients of the same
   * server and closed once none is left.
   */
  close(): Promise<void>
  [Symbol.asyncDispose](): Promise<void>
  /**
   * Runs `fn` at each tick of `when` on one of the processes that schedule `name`: a cron
   * expression (croner's: 5 fields, or 6 with seconds first; `options.timezone`), or an interval in
   * ms (a number or `{ every }`, ticks at its multiples since the epoch). A tick whose lock is
   * held elsewhere, or that the run record shows as run, is skipped, never queued.
   */
  schedule(name: string, when: string | number | { every: number }, fn: (context: JobContext) => unknown, options?: ScheduleOptions): Job
  /**
   * Runs `fn` once if job `name`'s lock is free (and, with `tick`, if that tick is not
   * recorded as run). Rejects with fn's error, or the LockLostError if the lock was lost.
   */
  runOnce<T>(name: string, fn: (context: JobContext) => T | PromiseLike<T>, options?: RunOnceOptions): Promise<RunOnceResult<Awaited<T>>>
  /** The last run of every job (names starting with `prefix`), as recorded in the store, by name. */
  jobs(options?: { prefix?: string, limit?: number }): Promise<JobRun[]>
}

// ───────────────────────────── jobs ─────────────────────────────

/** What `runOnce` takes (see docs/jobs.md). */
export interface RunOnceOptions {
  /** The lease in ms (default 60 000): a crashed runner frees the job after it. */
  atMostFor?: number
  /** Keep the lock at least this long after the run's start (default 0, at most `atMostFor`). */
  atLeastFor?: number
  /** Extend the lease while `fn` runs (default false). */
  keepAlive?: boolean
  /** The tick this call is for: skipped if the record shows it (or a later one) run. */
  tick?: Date | number
}

/** What `schedule` takes (see docs/jobs.md). */
export interface ScheduleOptions extends Omit<RunOnceOptions, 'tick'> {
  /** Called with what `fn` threw (or the loss, or the store's error) and the run; default: a process warning. */
  onError?: (error: unknown, run: JobRun | null) => void
  /** An IANA time zone for a cron expression (default: the process's). */
  timezone?: string
  /** How long `stop()` and `close()` let a running `fn` finish before aborting its signal, in ms (default 10 000). */
  stopTimeout?: number
}

/** What `fn` receives. */
export interface JobContext {
  readonly name: string
  /** The tick this run is for (ms since the epoch), or null for a runOnce call without one. */
  readonly tick: number | null
  /** Aborted when the lock is lost (a LockLostError) or the job is stopped past its bound (a LockAbortedError). */
  readonly signal: AbortSignal
  readonly fencingToken: bigint
  /** The job's lock. */
  readonly lock: Lock
  /** Throws a LockNotHeldError unless the lock is still held. */
  assertLocked(): void
}

/** How a run ended. */
export type JobOutcome = 'running' | 'ran' | 'failed' | 'lost' | 'skipped' | 'error'

/** A run of a job: `jobs()` reads them from the store; `lastRun` and the channel carry them too. */
export interface JobRun {
  name: string
  /** The tick (ms since the epoch), or null. */
  tick: number | null
  outcome: JobOutcome
  /** Why a tick was skipped ('busy', 'done', 'running'), erred ('acquire', 'record') or was lost before fn ran ('claim'); on runs `lastRun` and the channel show. */
  reason?: 'busy' | 'done' | 'running' | 'acquire' | 'record' | 'claim' | null
  /** ms since the epoch, by the runner's clock. */
  startedAt: number | null
  endedAt: number | null
  durationMs: number | null
  /** Who ran it. */
  holder: Holder | null
  owner: string | null
  fencingToken: bigint | null
  /** When the runner's schedule was next due (ms since the epoch), or null. */
  nextDue: number | null
  /** What fn threw (its name and code only: a message may hold anything). */
  error: { name: string, code: string | null } | null
  toJSON(): JobRunJSON
}

/** A JobRun as JSON shows it: the token as a string. */
export type JobRunJSON = Omit<JobRun, 'fencingToken' | 'toJSON'> & { fencingToken: string | null }

/** What `runOnce` resolves with. */
export interface RunOnceResult<T> {
  /** False when skipped. */
  ran: boolean
  result: T | undefined
  run: JobRun
}

/** A scheduled job: `LockClient#schedule`. */
export declare class Job {
  readonly name: string
  /** When the next tick is due; null once stopped. */
  readonly nextRun: Date | null
  /** This process's last tick (skipped ones too), or null. */
  readonly lastRun: JobRun | null
  /** Whether fn runs in this process now. */
  readonly running: boolean
  /**
   * Stops scheduling; a running fn gets `stopTimeout` ms to finish, then its signal aborts
   * and it gets as long again. Its lock is kept per `atLeastFor` or released.
   */
  stop(): Promise<void>
}

/** Throws a LockNotHeldError unless called from a job's (or runOnce's) fn whose lock is held. */
export declare function assertLocked(): void

/** The message of `deadbolt:job`: a run as it settled, with the store and the error. */
export interface JobMessage extends Omit<JobRun, 'toJSON' | 'error'> {
  store: StoreName
  /** What fn threw, the LockLostError, or the store's error; null for a run that ran. */
  error: unknown
}

// ───── Diagnostics channels (node:diagnostics_channel) ─────
// deadbolt publishes nothing unless someone subscribes. Tracing channels `deadbolt:acquire`,
// `deadbolt:release` and `deadbolt:extend` carry one context object through their `start`,
// `end`, `asyncStart`, `asyncEnd` (and `error`) events; `deadbolt:lost` and `deadbolt:leader`
// are plain channels. These are the objects they carry.

/** What a lock is, as the diagnostics channels say: a semaphore's permits, a read-write lock's holds, an election's term. */
export type LockKind = 'lock' | 'semaphore' | 'read' | 'write' | 'election'

/**
 * The store behind a client: its name in the registry of stores, whichever of its schemes the
 * URL used (`rediss` and `redis+unix` are `redis`, `mariadb` `mysql`, `postgresql` `postgres`,
 * `etcds` `etcd`); Redis Cluster and Sentinel are `redis`, an array of Redis URLs `redlock`.
 */
export type StoreName = 'redis' | 'redlock' | 'mysql' | 'postgres' | 'sqlite' | 'dynamodb' | 'etcd' | 'memory' | (string & {})

/** How an acquisition ended. */
export type AcquireResult =
  /** It holds the lock. */
  | 'granted'
  /** Busy: a `tryAcquire` (or a drop-in face's attempts) gave up and resolved null. */
  | 'refused'
  /** Busy until `wait` ran out: rejected with ERR_LOCK_ACQUISITION. */
  | 'timeout'
  /** Its signal fired. */
  | 'aborted'
  /** Anything else: the store failed, the client closed. */
  | 'error'

/** The context of `deadbolt:acquire` (one per acquisition; a reentrant re-entry that shares a held lock is none). */
export interface AcquireContext {
  key: string
  store: StoreName
  kind: LockKind
  /** Lease asked for, in ms. */
  ttl: number
  /** The owner token the lock is taken with. */
  owner: string
  /** Permits asked for: 1 for a lock, a read hold or an election; all of them for a write hold. */
  permits: number
  /**
   * True for `adopt` (a lease taken over from its owner, once read in the store): `granted`,
   * `refused` when the lease ended between the read and the take-over, or `error`. An `adopt`
   * that finds no lease of that owner publishes nothing.
   */
  adopted: boolean
  /** Set at `asyncStart`. */
  result?: AcquireResult
  /** The granted lock's fencing token (null when taken with `fencing: false`); set when granted. */
  fencingToken?: bigint | null
  /** From `start` to the settlement, in ms; set at `asyncStart`. */
  waitedMs?: number
  /** The lock (a Permit or RwHold for those kinds), when granted: the same object later contexts name. */
  lock?: Lock
  /** The rejection, for `timeout`, `aborted` and `error` (also published on `error`). */
  error?: unknown
}

/** What `deadbolt:release`, `deadbolt:extend` and `deadbolt:lost` say about a held lock. */
export interface HeldContext {
  key: string
  store: StoreName
  kind: LockKind
  owner: string
  permits: number
  fencingToken: bigint | null
  lock: Lock
  /** ms since the grant; null when nobody listened to deadbolt's channels at the grant. */
  heldMs: number | null
}

/** The context of `deadbolt:release`: a release that reached the store, or `close()` releasing it. */
export interface ReleaseContext extends HeldContext {
  /**
   * Set at `asyncStart`: `not-held` when the lease had already ended or been taken; `left` when
   * `close()` let go of a lock its holder stopped extending (left in the store to lapse or be adopted).
   */
  result?: 'released' | 'not-held' | 'left' | 'error'
  /** True when `close()` let go of it (then every event is published at once). */
  closed?: boolean
  error?: unknown
}

/** The context of `deadbolt:extend`: an `extend()` call, or a heartbeat of an auto-extended lock acquired while someone subscribed. */
export interface ExtendContext extends HeldContext {
  /** The lease asked for, in ms. */
  ttl: number
  /** True for a heartbeat (its events are published together, once it succeeded; a failed one is a `deadbolt:lost`). */
  heartbeat: boolean
  result?: 'extended' | 'not-held' | 'error'
  error?: unknown
}

/** The message of `deadbolt:lost`. */
export interface LostMessage extends HeldContext {
  /** Why: `not-owned`, `expired`, `unreachable`, `max-hold` or `store-replaced`. */
  cause: LostReason | 'store-replaced'
  /** The LockLostError the holder is given. */
  error: LockLostError
  /**
   * True when its holder had called `stopExtending`: the lease lapsed as asked (a handover),
   * which `deadbolt/otel` does not count as a loss.
   */
  stopped: boolean
}

/** The message of `deadbolt:leader`. */
export interface LeaderMessage {
  /** The election's name. */
  key: string
  store: StoreName
  owner: string
  /** The leadership lock's fencing token. */
  term: bigint | null
  /** True when this candidate became leader, false when it stopped being one. */
  leader: boolean
  /** Why it stopped: `lost` (the lease was lost) or `resigned`; null when elected. */
  reason: 'lost' | 'resigned' | null
  lock: Lock
}


/**
 * What `connect` takes besides one URL: an array of `redis://`/`rediss://` URLs, one per
 * independent Redis server, locked with the Redlock algorithm (a quorum of ⌊N/2⌋ + 1).
 */
export type RedlockServers = readonly string[]

/** A Redis Cluster, by some of its nodes (`redis://` or `rediss://` URLs); the rest is discovered. */
export interface RedisClusterTarget {
  cluster: readonly string[]
}

/** The primary that Redis Sentinel monitors under `name`, followed across failovers. */
export interface RedisSentinelTarget {
  /** The sentinels (`redis://` or `rediss://` URLs, with their own credentials if any). */
  sentinels: readonly string[]
  /** The name the sentinels monitor the primary under. */
  name: string
  /** The primary's username. */
  username?: string
  /** The primary's password (never shown in errors or `util.inspect`). */
  password?: string
  /**
   * Replicas that must have every write that grants or extends a lease (`WAIT`) before it
   * counts; a grant they do not acknowledge in time is given back and the call rejects with
   * a LockBackendError (`ERR_LOCK_STORE_TIMEOUT`). Default 0 (no waiting).
   */
  waitReplicas?: number
  /** How long to wait for them, in ms; keep it below `responseTimeout`. Default 1 000. */
  waitTimeout?: number
}

/**
 * Connects to `redis://`, `rediss://`, `redis+unix:///path`, `mysql://`, `mariadb://`,
 * `postgres://`, `postgresql://`, `sqlite:///absolute/path`, `sqlite://relative/path` (to the
 * working directory), `dynamodb://<table>`, `etcd://host:2379[,host:2379…]` (`etcds://` for
 * TLS) or `memory://[name]`; with an array of Redis URLs, to Redlock over those independent
 * servers; with `{ cluster }`, to a Redis Cluster; with
 * `{ sentinels, name }`, to the primary Redis Sentinel names. Resolves once the store answers
 * (unless `lazy`; Redlock: once a quorum answers).
 */
export declare function connect(url: string | RedlockServers | RedisClusterTarget | RedisSentinelTarget, options?: ConnectOptions): Promise<LockClient>

// ───────────────────────────── redislock face ─────────────────────────────

/**
 * What `createLock` accepts as a client: it is only read, never patched. Besides URLs and
 * options: node_redis v3, node-redis v4/v5 and ioredis clients, and the cluster clients of
 * ioredis (`Cluster`) and node-redis (`createCluster`; v4 once connected), whose nodes it reads.
 */
export type RedisClientLike =
  | string
  | { url?: string; host?: string; port?: number; path?: string; db?: number; database?: number; username?: string; password?: string; tls?: boolean | TlsOptions; socket?: unknown }
  | object

export interface RedislockOptions {
  /** Lease in ms. Default 10 000. */
  timeout?: number
  /** Retries after the first attempt; -1 retries forever. Default 0. */
  retries?: number
  /** Delay between attempts in ms. Default 50. */
  delay?: number
  /**
   * deadbolt's own. Default false: no fencing token (`fencingToken` stays null), as redislock
   * has none, and an uncontended acquisition is redislock's own `SET key id PX timeout NX`.
   * true: each acquisition draws a token (`fencingToken`, a bigint) in a script call. Either
   * way the key holds the bare `_id`, redislock's own value, and redislock processes exclude
   * it and it them.
   */
  fencing?: boolean
}

/** A promise that also supports bluebird's filtered catch and nodeify, as redislock's did. */
export interface CompatPromise<T> extends Promise<T> {
  catch<R = never>(onrejected?: ((reason: any) => R | PromiseLike<R>) | null): CompatPromise<T | R>
  catch<R = never>(
    filter: (new (...args: any[]) => Error) | ((err: any) => boolean) | object,
    onrejected: (reason: any) => R | PromiseLike<R>,
  ): CompatPromise<T | R>
  nodeify(cb?: (err: Error | null, value?: T) => void): CompatPromise<T>
  asCallback(cb?: (err: Error | null, value?: T) => void): CompatPromise<T>
}

/** A redislock-compatible lock object. */
export interface RedisLock {
  readonly _id: string
  readonly _locked: boolean
  readonly _key: string | null
  timeout: number
  retries: number
  delay: number
  /** Whether acquisitions draw a fencing token (deadbolt's option, default false). */
  fencing: boolean
  /** Fencing token of the current acquisition, or null (always null without `fencing: true`). */
  readonly fencingToken: bigint | null
  acquire(key: string, cb?: (err: Error | null) => void): CompatPromise<void>
  release(cb?: (err: Error | null) => void): CompatPromise<void>
  extend(time?: number, cb?: (err: Error | null) => void): CompatPromise<void>
  /** What `JSON.stringify` shows: redislock's fields (no client handle), fencing, the token. */
  toJSON(): RedisLockJSON
}

/** `JSON.stringify` of a redislock-face lock, parsed back: redislock's own lock's fields first. */
export interface RedisLockJSON {
  _id: string
  _locked: boolean
  _key: string | null
  timeout: number
  retries: number
  delay: number
  fencing: boolean
  /** The current acquisition's fencing token as a decimal string, or null. */
  fencingToken: string | null
}

export declare function createLock(client: RedisClientLike, options?: RedislockOptions): RedisLock
export declare function setDefaults(options: RedislockOptions): void
export declare function getAcquiredLocks(): RedisLock[]

// ───────────────────────────── sql-lock face ─────────────────────────────

/** sql-lock's error types (its `INVALID_PARAMTERS` spelling included). */
export declare const DLMErrorTypes: {
  readonly INVALID_PARAMTERS: 'invalid_parameters'
  readonly INVALID_PARAMETERS: 'invalid_parameters'
  readonly NOT_INITIALIZED: 'not_initialized'
  readonly INITIALIZATION_FAILED: 'initialization_failed'
}
export type DLMErrorType = 'invalid_parameters' | 'not_initialized' | 'initialization_failed'

/**
 * sql-lock's error. `err_message` keeps sql-lock's text ('Invalid Key', 'Mysql URI Missing',
 * 'configuration not set'); `message` adds the detail. Bad input ('invalid_parameters') is a
 * TypeError or RangeError that also passes `instanceof DLMError`, with Node's code
 * (ERR_INVALID_ARG_TYPE, ERR_INVALID_ARG_VALUE or ERR_OUT_OF_RANGE).
 */
export declare class DLMError extends Error {
  constructor(error: { err_type: DLMErrorType; err_message: string; code?: string }, options?: { message?: string; cause?: unknown })
  err_type: DLMErrorType
  err_message: string
  /**
   * 'ERR_LOCK_NOT_INITIALIZED', 'ERR_LOCK_INITIALIZATION_FAILED', or for 'invalid_parameters'
   * 'ERR_INVALID_ARG_TYPE' | 'ERR_INVALID_ARG_VALUE' | 'ERR_OUT_OF_RANGE'.
   */
  code: string
  /** What `JSON.stringify` shows: name, code, message, err_type, err_message and the cause. */
  toJSON(): LockErrorJSON
}

export interface InitializationOptions {
  /** Default ttl of getLock and transaction, in ms (a positive integer). Default 10 000. */
  locking_ttl?: number
  /** deadbolt: connection pool size. Held locks pin no connection. Default 10. */
  poolSize?: number
  /** deadbolt: the lease table, created on first use. Default `deadbolt_locks`. */
  table?: string
  /** deadbolt: bound on reaching the server, in ms. Default 5 000. */
  connectTimeout?: number
  /**
   * deadbolt: base delay between a waiting getLock's polls, in ms (±50 % jitter). Waiters in
   * the same process are woken at once by a release; other processes poll. Default 50.
   */
  retryDelay?: number
}

/** Releases the lock; idempotent; resolves also when the lease had already run out. */
export interface LockReleaser {
  (): Promise<void>
  /** The acquisition's fencing token: strictly increases per key. */
  readonly fencingToken: bigint
  /** What `JSON.stringify` shows (not enumerable): the token as a decimal string. */
  toJSON(): { fencingToken: string }
}

/**
 * Connects to `mysql://` or `mariadb://` and creates the lock table if needed. Rejects with a
 * DLMError: 'invalid_parameters' (missing or malformed URI or options) or
 * 'initialization_failed' (server unreachable or refusing; `cause` says why).
 */
export declare function initialize(mysqlUri: string, options?: InitializationOptions): Promise<void>
/**
 * Takes `key` for `ttl` ms (default: locking_ttl), waiting as long as it takes; resolves the
 * releaser. Rejects with DLMError 'not_initialized' before initialize, 'invalid_parameters'
 * for bad input (before any I/O), LockBackendError if the store fails.
 */
export declare function getLock(key: string, ttl?: number): Promise<LockReleaser>
/** Runs `func` holding `key` (ttl: locking_ttl) and releases afterwards, also when it throws. */
export declare function transaction<T>(key: string, func: () => T | Promise<T>): Promise<T>
/** Releases the locks taken through this face and closes its connections. Idempotent. */
export declare function close(): Promise<void>
