// Types of `deadbolt/redlock` (require and import): node-redlock 5's exports.

/**
 * node-redlock 5's exports, wire compatible with redlock 5.0.0-beta.2.
 *
 * @packageDocumentation
 * @module deadbolt/redlock
 */
import { EventEmitter } from 'events'

/**
 * A Redis connection of the caller's: an ioredis client or Cluster, a node-redis 4/5 client
 * or cluster, or a `redis://` / `rediss://` URL (opened with the application's ioredis, else
 * its node-redis).
 */
export type Client = object | string

/** Retry and timing settings (ms). */
export interface Settings {
  /** Clock drift allowed, as a fraction of the duration (default 0.01). */
  readonly driftFactor: number
  /** Retries after the first attempt; -1 retries forever (default 10). */
  readonly retryCount: number
  /** Pause between attempts (default 200). */
  readonly retryDelay: number
  /** Up to this much is added to or taken from each pause (default 100). */
  readonly retryJitter: number
  /** using() extends the lock this long before it would expire (default 500). */
  readonly automaticExtensionThreshold: number
}

/** One attempt's votes, complete once every server answered. */
export interface ExecutionStats {
  readonly membershipSize: number
  readonly quorumSize: number
  readonly votesFor: Set<Client>
  readonly votesAgainst: Map<Client, Error>
}

/** Each attempt's stats (a promise per attempt: the outcome is known before every vote is in). */
export interface ExecutionResult {
  attempts: ReadonlyArray<Promise<ExecutionStats>>
}

/** A server's vote against: one or more of the resources were locked by someone else. */
export declare class ResourceLockedError extends Error {
  constructor(message: string)
  readonly code: 'ERR_LOCK_RESOURCE_LOCKED'
}

/** An operation won no quorum within its retries; `code` names the operation. */
export declare class ExecutionError extends Error {
  constructor(message: string, attempts: ReadonlyArray<Promise<ExecutionStats>>)
  readonly attempts: ReadonlyArray<Promise<ExecutionStats>>
  readonly code: 'ERR_LOCK_ACQUISITION' | 'ERR_LOCK_EXTEND' | 'ERR_LOCK_RELEASE'
}

/** A held lock. `extend` resolves a new Lock; this one's expiration becomes 0. */
export declare class Lock {
  constructor(redlock: Redlock, resources: string[], value: string, attempts: ReadonlyArray<Promise<ExecutionStats>>, expiration: number)
  readonly redlock: Redlock
  readonly resources: string[]
  /** The value every key of the lock holds: 16 random bytes in hex. */
  readonly value: string
  readonly attempts: ReadonlyArray<Promise<ExecutionStats>>
  /** When the lock's validity ends (ms since the epoch); 0 once released or replaced. */
  expiration: number
  release(): Promise<ExecutionResult>
  extend(duration: number): Promise<Lock>
}

/** The signal using() passes to its routine; `error` says why it aborted. */
export type RedlockAbortSignal = AbortSignal & { error?: Error }

/** Script texts, or functions of the default text. */
export interface Scripts {
  readonly acquireScript?: string | ((script: string) => string)
  readonly extendScript?: string | ((script: string) => string)
  readonly releaseScript?: string | ((script: string) => string)
}

/**
 * Locks over N independent Redis servers (a quorum of ⌊N/2⌋ + 1), wire compatible with
 * node-redlock 4 and 5. Emits `error` for every client error and refusal, even outvoted ones.
 */
declare class Redlock extends EventEmitter {
  constructor(clients: Iterable<Client>, settings?: Partial<Settings>, scripts?: Scripts)
  readonly clients: Set<Client>
  readonly settings: Settings
  readonly scripts: {
    readonly acquireScript: { value: string; hash: string }
    readonly extendScript: { value: string; hash: string }
    readonly releaseScript: { value: string; hash: string }
  }
  /** Quits every client, those given and those opened from URLs. */
  quit(): Promise<void>
  /** Locks every resource for `duration` ms (an integer). Cancel safety: none (no signal). */
  acquire(resources: string[], duration: number, settings?: Partial<Settings>): Promise<Lock>
  /** Releases the lock; rejects at once when a quorum no longer held it. */
  release(lock: Lock, settings?: Partial<Settings>): Promise<ExecutionResult>
  /** Extends to `duration` ms from now; rejects at once when a quorum no longer holds it. */
  extend(existing: Lock, duration: number, settings?: Partial<Settings>): Promise<Lock>
  /** Runs `routine` holding the lock, extending it; releases it after. */
  using<T>(resources: string[], duration: number, settings: Partial<Settings>, routine?: (signal: RedlockAbortSignal) => Promise<T>): Promise<T>
  using<T>(resources: string[], duration: number, routine: (signal: RedlockAbortSignal) => Promise<T>): Promise<T>
}

export { Redlock }
export default Redlock
