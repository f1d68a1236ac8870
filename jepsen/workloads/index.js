'use strict'
// The workloads by name: each is `round(ctx)` (one actor's round, run in a worker) and the
// `model` the checker applies to its history (exclusive, read-write or semaphore; whether a
// fenced register is written).

module.exports = {
  mutex: require('./mutex'),
  semaphore: require('./semaphore'),
  rwlock: require('./rwlock'),
  election: require('./election'),
  handover: require('./handover'),
  weblocks: require('./weblocks'),
  acquireall: require('./acquireall'),
  jobs: require('./jobs'),
}
