// Types of `deadbolt/redislock` (require): redislock 1.3's exports.

/**
 * redislock 1.3's exports, wire compatible: change only the `require` line.
 *
 * @packageDocumentation
 * @module deadbolt/redislock
 */
export {
  createLock,
  setDefaults,
  getAcquiredLocks,
  LockAcquisitionError,
  LockReleaseError,
  LockExtendError,
} from '../index.js'
export type { RedisClientLike, RedislockOptions, RedisLock, RedisLockJSON, CompatPromise } from '../index.js'
