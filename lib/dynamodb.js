'use strict'
// The DynamoDB connect options (which ones: the registry's `dynamodb` entry), checked before
// any I/O and turned into what the native side takes. Messages name the option and say what
// is wrong, but never show a credential.

const v = require('./validate')
const registry = require('./registry')

const DYNAMODB = registry.byName('dynamodb')
/** Connect options that only `dynamodb://` URLs take. */
const DYNAMODB_OPTIONS = DYNAMODB.options
/** Connect options of other stores, refused with `dynamodb://`. */
const NOT_DYNAMODB = registry.STORE_OPTIONS.filter((k) => !DYNAMODB_OPTIONS.includes(k))
/** Why some of those do not apply, for the message. */
const WHY_NOT = {
  table: 'the URL names the table (dynamodb://<table>)',
  poolSize: 'it uses one pool of HTTP connections',
  tls: 'an https:// endpoint is verified against the public roots',
}
const CREDENTIAL_KEYS = new Set(['accessKeyId', 'secretAccessKey', 'sessionToken'])
const SORT_KEY_KEYS = new Set(['name', 'value'])
// The lock item's own attributes (src/store/dynamodb/item.rs): no key may be named after one.
const LOCK_ATTRIBUTES = new Set(['ownerName', 'leaseDuration', 'recordVersionNumber', 'data', 'isReleased', 'fencingToken'])
const MAX_ATTRIBUTE_BYTES = 255
const MAX_SORT_VALUE_BYTES = 1024

/** What was received, without its contents (for credentials). */
function shape(value) {
  if (value === null) return 'null'
  if (typeof value === 'string') return `a string of ${value.length} characters`
  if (typeof value === 'object') return `an instance of ${value.constructor?.name ?? 'Object'}`
  return `type ${typeof value}`
}

function shapeError(name, reason, value, code) {
  const err = new TypeError(`The "${name}" argument ${reason}. Received ${shape(value)}`)
  err.code = code
  return err
}

function checkCredentials(value) {
  const name = 'options.credentials'
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw shapeError(name, 'must be of type object ({ accessKeyId, secretAccessKey, sessionToken })', value, 'ERR_INVALID_ARG_TYPE')
  }
  for (const k of Object.keys(value)) {
    if (!CREDENTIAL_KEYS.has(k) && value[k] !== undefined) {
      throw shapeError(`${name}.${k.length > 40 ? k.slice(0, 37) + '...' : k}`, 'is not supported (use accessKeyId, secretAccessKey and sessionToken)', value[k], 'ERR_INVALID_ARG_VALUE')
    }
  }
  const out = {}
  for (const [k, required] of [['accessKeyId', true], ['secretAccessKey', true], ['sessionToken', false]]) {
    const s = v.own(value, k)
    if (s === undefined && !required) continue
    if (typeof s !== 'string') throw shapeError(`${name}.${k}`, 'must be of type string', s, 'ERR_INVALID_ARG_TYPE')
    if (s === '' || !s.isWellFormed()) throw shapeError(`${name}.${k}`, 'must be a non-empty string without lone surrogates', s, 'ERR_INVALID_ARG_VALUE')
    out[k] = s
  }
  return out
}

function checkAttribute(value, name) {
  if (typeof value !== 'string') throw v.typeError(name, 'of type string', value)
  v.checkWellFormed(value, name)
  const bytes = Buffer.byteLength(value)
  if (bytes === 0 || bytes > MAX_ATTRIBUTE_BYTES) throw v.rangeError(`${name}.length`, `1 to ${MAX_ATTRIBUTE_BYTES} bytes`, bytes)
  if (LOCK_ATTRIBUTES.has(value)) throw v.valueError(name, 'must not be an attribute the lock items use', value)
  return value
}

/**
 * Checks the options of a connect to `dynamodb://` (or refuses them for another store) and
 * returns `{ native, secrets }`: the native side's `dynamodb` options (undefined for another
 * store) and the credential strings to scrub from every message. `target`: connect()'s parsed
 * first argument (lib/topology.js).
 */
function dynamoOptions(target, o) {
  if (target.store !== DYNAMODB.name) {
    for (const k of DYNAMODB_OPTIONS) {
      if (o[k] !== undefined) throw shapeError(`options.${k}`, 'applies to dynamodb:// URLs only', o[k], 'ERR_INVALID_ARG_VALUE')
    }
    return { native: undefined, secrets: [] }
  }
  for (const k of NOT_DYNAMODB) {
    const why = WHY_NOT[k] === undefined ? '' : `: ${WHY_NOT[k]}`
    if (o[k] !== undefined) throw shapeError(`options.${k}`, `does not apply to dynamodb:// URLs${why}`, o[k], 'ERR_INVALID_ARG_VALUE')
  }
  const native = {}
  if (o.createTable !== undefined) native.createTable = v.checkBoolean(o.createTable, 'options.createTable')
  if (o.deleteOnRelease !== undefined) native.deleteOnRelease = v.checkBoolean(o.deleteOnRelease, 'options.deleteOnRelease')
  if (o.partitionKey !== undefined) native.partitionKey = checkAttribute(o.partitionKey, 'options.partitionKey')
  if (o.sortKey !== undefined) {
    const sk = v.checkObject(o.sortKey, 'options.sortKey')
    v.checkKnownKeys(sk, SORT_KEY_KEYS, 'options.sortKey')
    const name = checkAttribute(v.own(sk, 'name'), 'options.sortKey.name')
    if (name === (native.partitionKey ?? 'key')) throw v.valueError('options.sortKey.name', 'must differ from the partition key', name)
    const value = v.own(sk, 'value')
    if (typeof value !== 'string') throw v.typeError('options.sortKey.value', 'of type string', value)
    v.checkWellFormed(value, 'options.sortKey.value')
    const bytes = Buffer.byteLength(value)
    if (bytes === 0 || bytes > MAX_SORT_VALUE_BYTES) throw v.rangeError('options.sortKey.value.length', `1 to ${MAX_SORT_VALUE_BYTES} bytes`, bytes)
    native.sortKey = { name, value }
  }
  const secrets = []
  if (o.credentials !== undefined) {
    native.credentials = checkCredentials(o.credentials)
    secrets.push(...Object.values(native.credentials))
  }
  return { native, secrets }
}

module.exports = { dynamoOptions }
