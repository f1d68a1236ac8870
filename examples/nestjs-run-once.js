'use strict'
// A method decorator for @nestjs/schedule: put it under `@Cron(...)`, and the method runs on
// one replica per tick. The class needs a `locks` property holding a deadbolt LockClient.
// docs/jobs.md shows this code, and __test__/jobs.nestjs.test.js runs it on two Nest
// application contexts. deadbolt ships no NestJS entry point, so that it does not depend on
// NestJS: copy this file into your project.

/**
 * Runs the decorated method through `this.locks.runOnce(name, …)`, naming the tick by the
 * scheduled second, so that a replica that fires late does not run the same tick again.
 * @param {string} name the job's lock name, the same on every replica
 * @param {Omit<import('deadbolt').RunOnceOptions, 'tick'>} [options] atMostFor, atLeastFor, keepAlive
 */
function RunOnce(name, options = {}) {
  return (_target, _key, descriptor) => {
    const method = descriptor.value
    descriptor.value = async function (...args) {
      // The tick: the scheduled time, rounded to the cron's resolution (a second).
      const tick = Math.round(Date.now() / 1000) * 1000
      await this.locks.runOnce(name, () => method.apply(this, args), { ...options, tick })
    }
    return descriptor
  }
}

module.exports = { RunOnce }
