'use strict'
// redislock returned bluebird promises, and its README teaches two bluebird idioms:
// `.catch(ErrorClass, handler)` (a filtered catch) and `.nodeify(cb)`. On a native promise the
// first silently treats the class as the handler and swallows every error. This subclass keeps
// both idioms working; everything else is a plain Promise.

function matches(predicate, err) {
  if (typeof predicate === 'function') {
    if (predicate === Error || predicate.prototype instanceof Error) return err instanceof predicate
    return Boolean(predicate(err))
  }
  if (predicate !== null && typeof predicate === 'object') {
    if (err === null || typeof err !== 'object') return false
    return Object.keys(predicate).every((k) => err[k] === predicate[k])
  }
  return false
}

class CompatPromise extends Promise {
  /**
   * `catch(handler)` as usual, or bluebird's `catch(Class | predicate | object, ..., handler)`:
   * the handler runs only for matching errors, others propagate.
   */
  catch(...args) {
    if (args.length <= 1) return super.catch(...args)
    const handler = args[args.length - 1]
    const predicates = args.slice(0, -1)
    return this.then(undefined, (err) => {
      if (predicates.some((p) => matches(p, err))) return handler(err)
      throw err
    })
  }

  /** bluebird's `nodeify(cb)`: calls `cb(err)` or `cb(null, value)`; returns this promise. */
  nodeify(cb) {
    if (typeof cb !== 'function') return this
    this.then(
      (value) => { cb(null, value) },
      (err) => { cb(err) },
    )
    return this
  }

  /** bluebird's alias of `nodeify`. */
  asCallback(cb) {
    return this.nodeify(cb)
  }
}

/** Wraps any thenable (or async function result) into a CompatPromise. */
function compat(promise) {
  return new CompatPromise((resolve, reject) => promise.then(resolve, reject))
}

module.exports = { CompatPromise, compat }
