// `deadbolt/sql-lock` for `import`: the named exports, and the CommonJS module object as the
// default export (`import sqlLock from 'deadbolt/sql-lock'`).
import sqlLock from './index.js'

export const { initialize, getLock, transaction, close, DLMError, DLMErrorTypes } = sqlLock

export default sqlLock
