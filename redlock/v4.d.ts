// Types of `deadbolt/redlock/v4` (require): node-redlock 4's export.

/**
 * node-redlock 4's export, wire compatible with redlock 4.2.
 *
 * @packageDocumentation
 * @module deadbolt/redlock/v4
 */
import { EventEmitter } from 'events'

declare namespace Redlock {
  /** An ioredis, node-redis or node_redis 3 client or cluster, or a redis:// URL. */
  type Client = object | string

  type Callback<T> = (err: any, value?: T) => void

  /** A native promise with bluebird's idioms that node-redlock 4's callers use. */
  interface RedlockPromise<T> extends Promise<T> {
    catch<R = never>(onrejected?: ((reason: any) => R | PromiseLike<R>) | null): RedlockPromise<T | R>
    catch<R = never>(filter: (new (...args: any[]) => Error) | ((err: any) => boolean) | object, onrejected: (reason: any) => R | PromiseLike<R>): RedlockPromise<T | R>
    nodeify(cb?: Callback<T>): RedlockPromise<T>
    asCallback(cb?: Callback<T>): RedlockPromise<T>
    done(onfulfilled?: (value: T) => unknown, onrejected?: (reason: any) => unknown): void
  }

  /** What bluebird's Promise.using takes: it unlocks the lock after the block. */
  interface Disposer<T> {
    promise(): RedlockPromise<T>
    resource(): T | null
    tryDispose(): unknown
  }

  interface LockOptions {
    retryCount?: number
    retryDelay?: number
  }

  interface Options extends LockOptions {
    driftFactor?: number
    retryJitter?: number
    lockScript?(script: string): string
    unlockScript?(script: string): string
    extendScript?(script: string): string
  }

  class Lock {
    constructor(redlock: Redlock, resource: string | string[], value: string | null, expiration: number, attempts: number, attemptsRemaining: number)
    redlock: Redlock
    resource: string | string[]
    value: string | null
    /** When the lock's validity ends (ms since the epoch); 0 once unlocked. */
    expiration: number
    attempts: number
    attemptsRemaining: number
    unlock(callback?: Callback<void>): RedlockPromise<void>
    extend(ttl: number, callback?: Callback<Lock>): RedlockPromise<Lock>
  }

  /** Any failure; `code` names the operation. */
  class LockError extends Error {
    constructor(message?: string, attempts?: number)
    readonly name: 'LockError'
    attempts: number | undefined
    code: 'ERR_LOCK_ACQUISITION' | 'ERR_LOCK_EXTEND' | 'ERR_LOCK_RELEASE'
  }
}

/** node-redlock 4's Redlock, wire compatible with node-redlock 4 and 5. Emits `clientError`. */
declare class Redlock extends EventEmitter {
  constructor(clients: Redlock.Client[], options?: Redlock.Options)
  driftFactor: number
  retryCount: number
  retryDelay: number
  retryJitter: number
  lockScript: string
  unlockScript: string
  extendScript: string
  servers: Redlock.Client[]
  acquire(resource: string | string[], ttl: number, callback?: Redlock.Callback<Redlock.Lock>): Redlock.RedlockPromise<Redlock.Lock>
  lock(resource: string | string[], ttl: number, callback?: Redlock.Callback<Redlock.Lock>): Redlock.RedlockPromise<Redlock.Lock>
  acquireWithOptions(resource: string | string[], ttl: number, options: Redlock.LockOptions, callback?: Redlock.Callback<Redlock.Lock>): Redlock.RedlockPromise<Redlock.Lock>
  lockWithOptions(resource: string | string[], ttl: number, options: Redlock.LockOptions, callback?: Redlock.Callback<Redlock.Lock>): Redlock.RedlockPromise<Redlock.Lock>
  disposer(resource: string | string[], ttl: number, errorHandler?: (err: any) => void): Redlock.Disposer<Redlock.Lock>
  release(lock: Redlock.Lock, callback?: Redlock.Callback<void>): Redlock.RedlockPromise<void>
  unlock(lock: Redlock.Lock, callback?: Redlock.Callback<void>): Redlock.RedlockPromise<void>
  extend(lock: Redlock.Lock, ttl: number, callback?: Redlock.Callback<Redlock.Lock>): Redlock.RedlockPromise<Redlock.Lock>
  quit(callback?: Redlock.Callback<void>): Redlock.RedlockPromise<void>
}

export = Redlock
