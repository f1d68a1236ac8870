'use strict'
// The registry of stores as JavaScript reads it: the addon's one table (src/store/registry.rs,
// through `stores()`), indexed by scheme. Whatever in lib/ needs a store's name, its schemes or
// the connect options it takes asks here; no other module lists stores, schemes or their options.

const { stores } = require('./addon')

/** Every store of this build, in the registry's order: `{ name, schemes, example, tls, options }`. */
const STORES = Object.freeze(stores().map((e) => Object.freeze(e)))

const BY_SCHEME = new Map(STORES.flatMap((e) => e.schemes.map((s) => [s, e])))
const BY_NAME = new Map(STORES.map((e) => [e.name, e]))

/** The scheme of `url` (`scheme://…`), lower-cased, or undefined. */
function schemeOf(url) {
  const at = url.indexOf('://')
  return at > 0 ? url.slice(0, at).toLowerCase() : undefined
}

/** The store a (lower-case) scheme names, or undefined. */
function byScheme(scheme) {
  return scheme === undefined ? undefined : BY_SCHEME.get(scheme)
}

/** The store named `name` (`redis`, `mysql`, …); throws for a name the registry lacks. */
function byName(name) {
  const e = BY_NAME.get(name)
  if (e === undefined) throw new Error(`deadbolt: no store named ${name} in the registry`)
  return e
}

/** `a://, b:// or c://`, for messages. */
function listed(schemes) {
  const all = schemes.map((s) => `${s}://`)
  return all.length < 2 ? all.join('') : `${all.slice(0, -1).join(', ')} or ${all.at(-1)}`
}

/** Every connect option some store reads beyond the timeouts (JavaScript's names), once each. */
const STORE_OPTIONS = Object.freeze([...new Set(STORES.flatMap((e) => e.options))])

module.exports = { STORES, STORE_OPTIONS, schemeOf, byScheme, byName, listed }
