// Types of `deadbolt/redis-semaphore` (require): redis-semaphore 5.8's exports.

/**
 * redis-semaphore 5.8's exports, wire compatible.
 *
 * @packageDocumentation
 * @module deadbolt/redis-semaphore
 */
import { LockAcquisitionError, LockLostError } from '../index.js'

/**
 * A client the face drives: an ioredis client or Cluster (or ioredis-mock), whose
 * `set`/`eval`/`evalsha` it calls as redis-semaphore did, or a node-redis 4 or 5 client (or 5
 * cluster), through `sendCommand`.
 */
export type RedisClient =
  | { set(...args: any[]): unknown; eval(...args: any[]): unknown; evalsha(...args: any[]): unknown }
  | { sendCommand(...args: any[]): unknown }

/** Called (with the lock as `this`) when a refresh finds the lock lost. */
export interface LockLostCallback {
  (this: Lock, err: LostLockError): void
}

export interface TimeoutOptions {
  /** Lease in ms. Default 10 000. */
  lockTimeout?: number
  /** How long acquire() tries, in ms. Default 10 000. */
  acquireTimeout?: number
  /** How many attempts acquire() makes at most. Default Infinity. */
  acquireAttemptsLimit?: number
  /** Pause between attempts in ms. Default 10. */
  retryInterval?: number
  /** Refresh period in ms; 0 never refreshes. Default 0.8 × lockTimeout. */
  refreshInterval?: number
}

export interface LockOptions extends TimeoutOptions {
  /** @deprecated Use `identifier` + `acquiredExternally: true` instead. */
  externallyAcquiredIdentifier?: string
  /** @deprecated Provide a custom `identifier` instead. */
  identifierSuffix?: string
  /** The value (or member) the lock stores. Default a random UUID; must be unique per holder. */
  identifier?: string
  /** With `identifier`: acquire() confirms a lock taken elsewhere under it (one refresh). */
  acquiredExternally?: true
  /**
   * Called when a refresh finds the lock lost, or when refreshes failed for a whole
   * lockTimeout. Default: the error is emitted as a process warning (the original threw it,
   * an unhandled rejection that ends the process).
   */
  onLockLost?: LockLostCallback
}

/** A refresh found the lock gone or taken (`reason` 'not-owned'), or none confirmed it for a lockTimeout ('expired'). */
export declare class LostLockError extends LockLostError {}
/** acquire() ran out of acquireTimeout or acquireAttemptsLimit. */
export declare class TimeoutError extends LockAcquisitionError {}

/** The defaults: lockTimeout 10 000, acquireTimeout 10 000, acquireAttemptsLimit Infinity, retryInterval 10. */
export declare const defaultTimeoutOptions: {
  lockTimeout: number
  acquireTimeout: number
  acquireAttemptsLimit: number
  retryInterval: number
}

/** What every lock of the face has. */
export declare abstract class Lock {
  protected constructor(options?: LockOptions)
  /** The value (or member) the lock stores. */
  get identifier(): string
  /** Whether this instance holds the lock. */
  get isAcquired(): boolean
  /** deadbolt's own: until when (epoch ms) the lock is surely held (last confirmation + lockTimeout); null when not held. */
  get validUntil(): number | null
  /** Acquires or rejects with TimeoutError (or the signal's reason). */
  acquire(abortSignal?: AbortSignal): Promise<void>
  /** Acquires: false when acquireTimeout or acquireAttemptsLimit runs out. */
  tryAcquire(abortSignal?: AbortSignal): Promise<boolean>
  /** Releases (after any refresh in flight); resolves whether or not it was still held. */
  release(): Promise<void>
  /** Stops refreshing; the lock then expires lockTimeout after its last refresh. */
  stopRefresh(): void
}

/** A mutex on one Redis (`mutex:<key>` holds the identifier). */
export declare class Mutex extends Lock {
  constructor(client: RedisClient, key: string, options?: LockOptions)
}
/** `limit` holders at once on one Redis (the sorted set `semaphore:<key>`). */
export declare class Semaphore extends Mutex {
  constructor(client: RedisClient, key: string, limit: number, options?: LockOptions)
}
/** `permits` of a semaphore's `limit`, taken and given back together. */
export declare class MultiSemaphore extends Semaphore {
  constructor(client: RedisClient, key: string, limit: number, permits: number, options?: LockOptions)
}
/** A mutex held on a majority of independent servers. */
export declare class RedlockMutex extends Lock {
  constructor(clients: RedisClient[], key: string, options?: LockOptions)
}
/** A semaphore held on a majority of independent servers. */
export declare class RedlockSemaphore extends RedlockMutex {
  constructor(clients: RedisClient[], key: string, limit: number, options?: LockOptions)
}
/** `permits` of a semaphore held on a majority of independent servers. */
export declare class RedlockMultiSemaphore extends RedlockSemaphore {
  constructor(clients: RedisClient[], key: string, limit: number, permits: number, options?: LockOptions)
}
