// Types of `deadbolt/sql-lock` (require): sql-lock 0.1.3's exports plus close, DLMError and
// DLMErrorTypes.

/**
 * sql-lock 0.1.3's exports plus `close`, `DLMError` and `DLMErrorTypes`.
 *
 * @packageDocumentation
 * @module deadbolt/sql-lock
 */
export { initialize, getLock, transaction, close, DLMError, DLMErrorTypes } from '../index.js'
export type { DLMErrorType, InitializationOptions, LockReleaser } from '../index.js'
