// Types of `deadbolt/redislock` (import): the named exports and the module object as default.
import redislock from './index.js'

export * from './index.js'
export default redislock
