// Types of `deadbolt/redis-semaphore` (import): the named exports and the module object as default.
import redisSemaphore from './index.js'

export * from './index.js'
export default redisSemaphore
