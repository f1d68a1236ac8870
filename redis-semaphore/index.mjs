// `deadbolt/redis-semaphore` for `import`: redis-semaphore 5.8's exports by name, and the
// CommonJS module object as the default export.
import redisSemaphore from './index.js'

export const {
  Mutex,
  Semaphore,
  MultiSemaphore,
  RedlockMutex,
  RedlockSemaphore,
  RedlockMultiSemaphore,
  LostLockError,
  TimeoutError,
  defaultTimeoutOptions,
} = redisSemaphore

export default redisSemaphore
