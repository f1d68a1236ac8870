// `deadbolt/redislock` for `import`: redislock 1.3's exports by name, and the CommonJS module
// object as the default export (`import redislock from 'deadbolt/redislock'`).
import redislock from './index.js'

export const {
  createLock,
  setDefaults,
  getAcquiredLocks,
  LockAcquisitionError,
  LockReleaseError,
  LockExtendError,
} = redislock

export default redislock
