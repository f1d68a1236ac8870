'use strict'
// `deadbolt/redislock`: exactly redislock 1.3's exports, so that changing
// require('redislock') to require('deadbolt/redislock') is the whole migration. The same
// functions and classes as deadbolt's root exports of those names (one shared state).

const {
  createLock,
  setDefaults,
  getAcquiredLocks,
  LockAcquisitionError,
  LockReleaseError,
  LockExtendError,
} = require('../compat/redislock')

module.exports = {
  createLock,
  setDefaults,
  getAcquiredLocks,
  LockAcquisitionError,
  LockReleaseError,
  LockExtendError,
}
