'use strict'
// `deadbolt/redis-semaphore`: exactly redis-semaphore 5.8's exports, so that changing
// require('redis-semaphore') to require('deadbolt/redis-semaphore') is the whole migration.
// Wire compatible with the original (docs/redis-semaphore.md).

const {
  Mutex,
  Semaphore,
  MultiSemaphore,
  RedlockMutex,
  RedlockSemaphore,
  RedlockMultiSemaphore,
  LostLockError,
  TimeoutError,
  defaultTimeoutOptions,
} = require('../compat/redis-semaphore')

module.exports = {
  Mutex,
  Semaphore,
  MultiSemaphore,
  RedlockMutex,
  RedlockSemaphore,
  RedlockMultiSemaphore,
  LostLockError,
  TimeoutError,
  defaultTimeoutOptions,
}
