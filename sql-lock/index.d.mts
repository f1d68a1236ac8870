// Types of `deadbolt/sql-lock` (import): the named exports and the module object as default.
import sqlLock from './index.js'

export * from './index.js'
export default sqlLock
