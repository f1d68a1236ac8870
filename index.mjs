// deadbolt's ESM entry: every name of the CommonJS entry (index.js), by name, and the CommonJS
// module object as the default export. A wrapper, not a second copy: `import` and `require`
// share one module instance (one redislock defaults table, one sql-lock configuration).
// The names are listed explicitly because Node's static analysis of index.js does not see
// them all; __test__/esm.test.js checks that this list matches index.js's keys.

import deadbolt from './index.js'

export const {
  connect,
  LockClient,
  Lock,
  MultiLock,
  Semaphore,
  Permit,
  ReadWriteLock,
  RwHold,
  WebLock,
  Election,
  LockError,
  LockAcquisitionError,
  LockReleaseError,
  LockExtendError,
  LockLostError,
  LockBackendError,
  LockClosedError,
  LockAbortedError,
  LockNotHeldError,
  assertLocked,
  Job,
  createLock,
  setDefaults,
  getAcquiredLocks,
  initialize,
  getLock,
  transaction,
  close,
  DLMError,
  DLMErrorTypes,
} = deadbolt

export default deadbolt
