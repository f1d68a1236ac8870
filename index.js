'use strict'
// deadbolt's public entry point. Three faces over one native engine:
//  - the modern API: connect(url) → LockClient (leases, heartbeats, fencing, elections);
//  - redislock 1.3: createLock, setDefaults, getAcquiredLocks and its error classes;
//  - sql-lock: initialize, getLock, transaction, close and DLMError.
// A user of either old library changes only the require line.

const errors = require('./lib/errors')
const { connect, LockClient } = require('./lib/client')
const { Lock } = require('./lib/lock')
const { Election } = require('./lib/election')
const { MultiLock } = require('./lib/multilock')
const { Semaphore, Permit } = require('./lib/semaphore')
const { ReadWriteLock, RwHold } = require('./lib/rwlock')
const { WebLock } = require('./lib/weblocks')
const jobs = require('./lib/jobs')
const redislock = require('./compat/redislock')
const sqlLock = require('./compat/sql-lock')

module.exports = {
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
  LockError: errors.LockError,
  LockAcquisitionError: errors.LockAcquisitionError,
  LockReleaseError: errors.LockReleaseError,
  LockExtendError: errors.LockExtendError,
  LockLostError: errors.LockLostError,
  LockBackendError: errors.LockBackendError,
  LockClosedError: errors.LockClosedError,
  LockAbortedError: errors.LockAbortedError,
  LockNotHeldError: errors.LockNotHeldError,
  assertLocked: jobs.assertLocked,
  Job: jobs.Job,
  createLock: redislock.createLock,
  setDefaults: redislock.setDefaults,
  getAcquiredLocks: redislock.getAcquiredLocks,
  initialize: sqlLock.initialize,
  getLock: sqlLock.getLock,
  transaction: sqlLock.transaction,
  close: sqlLock.close,
  DLMError: sqlLock.DLMError,
  DLMErrorTypes: sqlLock.DLMErrorTypes,
}
