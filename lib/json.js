'use strict'
// What JSON.stringify makes of what deadbolt returns. JSON has no bigint (JSON.stringify throws
// "Do not know how to serialize a BigInt" on one), so every object that carries a fencing token
// has a toJSON that writes the token as its decimal string: exact beyond 2^53, where a number
// would be rounded, and what `String(token)` and `BigInt(string)` turn back and forth.

/** A fencing token (a bigint, a number, or null for none) as JSON shows it. */
function tokenJSON(token) {
  return token === null || token === undefined ? null : String(token)
}

/** toJSON of a record read from the store: its own fields, the token as a string. */
function recordToJSON() {
  return { ...this, fencingToken: tokenJSON(this.fencingToken) }
}

/**
 * Gives `record` (a plain object read from the store, with a `fencingToken`) its toJSON, as a
 * property that is not enumerable: Object.keys, spread and deepEqual still see the documented
 * fields only, and structuredClone (which copies enumerable properties) still takes it.
 */
function withToJSON(record) {
  Object.defineProperty(record, 'toJSON', { value: recordToJSON, writable: true, configurable: true })
  return record
}

module.exports = { tokenJSON, withToJSON }
