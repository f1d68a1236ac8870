'use strict'
// Turns what a redislock user passes as "client" into a connection URL for the native side
// (or, for a cluster client, the cluster's node URLs).
// The user's client is only read, never patched: deadbolt opens its own connection to the
// same server (host, port or socket path, db, credentials, TLS), trusting the same CA and
// presenting the same client certificate.

const { typeError } = require('../lib/validate')
const { redactUrl } = require('../lib/redact')
const { normalizeTls } = require('../lib/tls')
const registry = require('../lib/registry')

/** The Redis store's entry in the registry: which schemes a URL string may have. */
const REDIS = registry.byName('redis')

/**
 * The TLS material among a client's TLS options (`tls.connect` options: ca, cert, key,
 * servername, rejectUnauthorized), checked; undefined when it sets none. Other settings
 * (timeouts, ALPN…) are that client's own business.
 */
function tlsFrom(o, name) {
  if (o === null || typeof o !== 'object') return undefined
  const picked = {}
  let any = false
  for (const k of ['ca', 'cert', 'key', 'servername', 'rejectUnauthorized']) {
    if (o[k] !== undefined && o[k] !== null) {
      picked[k] = o[k]
      any = true
    }
  }
  return any ? normalizeTls(picked, name, { strict: false }) : undefined
}

/** ERR_INVALID_ARG_VALUE without echoing the value: a URL or options may carry a password. */
function invalid(name, reason, cause) {
  const err = new TypeError(`The argument '${name}' ${reason}`, cause === undefined ? undefined : { cause })
  err.code = 'ERR_INVALID_ARG_VALUE'
  return err
}

function enc(s) {
  return encodeURIComponent(String(s))
}

function build(options) {
  // Own properties only: a path or password put on Object.prototype must not be picked up.
  const { host = '127.0.0.1', port = 6379, path, db, username, password, tls } = Object.assign(Object.create(null), options)
  // A database is a small non-negative integer; anything else would only fail at connect time.
  if (db !== undefined && db !== null && db !== '' && !(Number.isSafeInteger(Number(db)) && Number(db) >= 0)) {
    throw invalid('client.db', 'must be a non-negative integer')
  }
  const auth = password != null && password !== ''
    ? `${username ? enc(username) : ''}:${enc(password)}@`
    : username ? `${enc(username)}@` : ''
  if (path) {
    const q = db ? `?db=${Number(db)}` : ''
    return `redis+unix://${auth}${path}${q}`
  }
  const h = String(host).includes(':') && !String(host).startsWith('[') ? `[${host}]` : host
  const dbPart = db ? `/${Number(db)}` : ''
  return `${tls ? 'rediss' : 'redis'}://${auth}${h}:${Number(port)}${dbPart}`
}

function fromUrlString(url, overrides = {}) {
  if (typeof url !== 'string' || !/^rediss?:\/\//i.test(url)) throw invalid('client.url', 'must be a redis:// or rediss:// URL')
  let u
  try {
    u = new URL(url)
  } catch (err) {
    // Not URL's own error as the cause: its `input` is the whole URL, password included.
    const cause = new TypeError('Invalid URL')
    cause.code = err.code ?? 'ERR_INVALID_URL'
    throw invalid('client.url', 'must be a valid redis:// or rediss:// URL', cause)
  }
  const base = {
    host: u.hostname.replace(/^\[|\]$/g, '') || '127.0.0.1',
    port: u.port || 6379,
    db: u.pathname && u.pathname.length > 1 ? Number(u.pathname.slice(1)) : 0,
    username: u.username ? decodeURIComponent(u.username) : undefined,
    password: u.password ? decodeURIComponent(u.password) : undefined,
    tls: u.protocol === 'rediss:',
  }
  return build({ ...base, ...overrides })
}

function defined(o) {
  const r = {}
  for (const [k, v] of Object.entries(o)) if (v !== undefined && v !== null) r[k] = v
  return r
}

/** node_redis v3 (callback API): connection_options, selected_db, options. */
function fromNodeRedis3(c) {
  const o = c.options || {}
  const co = c.connection_options || {}
  return build(defined({
    host: co.host ?? o.host,
    port: co.port ?? o.port,
    path: co.path ?? o.path,
    db: c.selected_db ?? o.db,
    username: o.user ?? o.username,
    password: o.password ?? o.auth_pass,
    tls: !!o.tls,
  }))
}

function tlsOfNodeRedis3(c) {
  return tlsFrom((c.options || {}).tls, 'client.options.tls')
}

/** node-redis v4/v5: options.url and/or options.socket, database, username, password. */
function fromNodeRedis4(c) {
  const o = c.options || {}
  const s = o.socket || {}
  const overrides = defined({
    host: s.host,
    port: s.port,
    path: s.path,
    db: o.database,
    username: o.username,
    password: o.password,
    tls: s.tls ? true : undefined,
  })
  if (o.url) return fromUrlString(o.url, overrides)
  return build(overrides)
}

/** node-redis v4/v5 keep the TLS options in `socket` itself, next to `tls: true`. */
function tlsOfNodeRedis4(c, name = 'client.options.socket') {
  const o = c.options || {}
  const s = o.socket || {}
  const on = s.tls === true || (typeof o.url === 'string' && /^rediss:/i.test(o.url))
  return on ? tlsFrom(s, name) : undefined
}

/** ioredis: options.host/port/path/db/username/password/tls. */
function fromIoredis(c) {
  const o = c.options || {}
  return build(defined({
    host: o.host,
    port: o.port,
    path: o.path,
    db: o.db,
    username: o.username,
    password: o.password,
    tls: o.tls ? true : undefined,
  }))
}

function tlsOfIoredis(c, name = 'client.options.tls') {
  return tlsFrom((c.options || {}).tls, name)
}

/**
 * @param {unknown} client a node_redis v3, node-redis v4/v5 or ioredis client, a redis:// or
 *   rediss:// URL, or an options object { url?, host?, port?, path?, db?, username?, password?, tls? }
 * @returns {string | { cluster: string[] }} a URL the native side understands (a cluster
 *   client: its nodes)
 */
function toRedisUrl(client, name = 'client') {
  return toRedisTarget(client, name).url
}

/**
 * Like `toRedisUrl`, with the client's TLS material: `{ url, tls }`, `tls` being undefined or
 * what `normalizeTls` returns; for a cluster client (ioredis `Cluster`, node-redis
 * `createCluster`), `url` is `{ cluster: [node URLs] }`, what `connect()` takes. Bad TLS
 * material throws here, before any I/O.
 */
function toRedisTarget(client, name = 'client') {
  const target = targetOf(client, name)
  // UTF-8 has no encoding for a lone surrogate: two distinct URLs (or passwords) would be one.
  const urls = typeof target.url === 'string' ? [target.url] : target.url.cluster
  if (!urls.every((u) => u.isWellFormed())) throw invalid(name, 'must not contain lone surrogates (they have no UTF-8 encoding)')
  return target
}

/**
 * ioredis `Cluster`: its startup nodes (ports, "host:port" or URL strings, { host, port }),
 * reached with the options every node connection uses (`redisOptions`: credentials, TLS).
 */
function fromIoredisCluster(c) {
  const ro = (c.options && c.options.redisOptions) || {}
  const auth = defined({ username: ro.username, password: ro.password, tls: ro.tls ? true : undefined })
  const nodes = (c.startupNodes || []).map((n) => {
    if (typeof n === 'number') return build({ ...auth, port: n })
    if (typeof n === 'string') {
      if (/^rediss?:\/\//i.test(n)) return fromUrlString(n, auth)
      const at = n.lastIndexOf(':')
      return build({ ...auth, ...defined(at > 0 ? { host: n.slice(0, at), port: n.slice(at + 1) } : { host: n }) })
    }
    return build({ ...auth, ...defined({ host: n && n.host, port: n && n.port }) })
  })
  if (nodes.length === 0) throw invalid('client', 'is an ioredis Cluster without startup nodes')
  return { url: { cluster: nodes }, tls: tlsFrom(ro.tls, 'client.options.redisOptions.tls') }
}

/**
 * node-redis `createCluster()` client: v5 keeps its `rootNodes` and `defaults` (credentials,
 * socket/TLS) readable; v4 hides them, so its nodes are read from `masters` once connected.
 */
function fromNodeRedisCluster(c) {
  const o = c._options || {}
  const d = o.defaults || {}
  let roots = Array.isArray(o.rootNodes) ? o.rootNodes : []
  if (roots.length === 0) roots = (c.masters || []).map((m) => ({ socket: { host: m.host, port: m.port } }))
  if (roots.length === 0) throw invalid('client', 'is a node-redis cluster whose nodes cannot be read: connect it first')
  const nodes = roots.map((n) => fromNodeRedis4({ options: { ...d, ...n, socket: { ...(d.socket || {}), ...(n.socket || {}) } } }))
  return { url: { cluster: nodes }, tls: tlsOfNodeRedis4({ options: d }, 'client.options.defaults.socket') }
}

const OPTION_KEYS = ['url', 'host', 'port', 'path', 'socket', 'db', 'database', 'username', 'password', 'tls']

function targetOf(client, name) {
  if (typeof client === 'string') {
    if (registry.byScheme(registry.schemeOf(client)) !== REDIS) {
      // Shown with any password masked: the string may be a URL with credentials.
      throw typeError(name, 'a redis client, a redis:// or rediss:// URL, or an options object', redactUrl(client))
    }
    return { url: client, tls: undefined }
  }
  if (client === null || typeof client !== 'object') {
    throw typeError(name, 'a redis client, a redis:// or rediss:// URL, or an options object', client)
  }
  // Clusters first: an ioredis Cluster also has `options` and `status`.
  if (client.isCluster === true && Array.isArray(client.startupNodes)) return fromIoredisCluster(client)
  if (typeof client.getMasters === 'function' && typeof client.isOpen === 'boolean' && 'masters' in client) return fromNodeRedisCluster(client)
  if (client.connection_options !== undefined || typeof client.send_command === 'function') {
    return { url: fromNodeRedis3(client), tls: tlsOfNodeRedis3(client) }
  }
  if (typeof client.isOpen === 'boolean' || typeof client.sendCommand === 'function' && client.options && ('socket' in client.options || 'url' in client.options)) {
    return { url: fromNodeRedis4(client), tls: tlsOfNodeRedis4(client) }
  }
  if (client.options && typeof client.status === 'string') return { url: fromIoredis(client), tls: tlsOfIoredis(client) }
  // A plain options object: its own properties only, not what someone put on Object.prototype.
  const own = Object.create(null)
  for (const k of OPTION_KEYS) if (Object.hasOwn(client, k)) own[k] = client[k]
  client = own
  const looksLikeOptions = ['url', 'host', 'port', 'path', 'socket', 'db', 'database'].some((k) => k in client)
  if (!looksLikeOptions) {
    throw typeError(name, 'a redis client, a redis:// or rediss:// URL, or an options object', client)
  }
  if (client.socket || 'database' in client) {
    return { url: fromNodeRedis4({ options: client }), tls: tlsOfNodeRedis4({ options: client }, `${name}.socket`) }
  }
  const tls = tlsFrom(client.tls, `${name}.tls`)
  if (client.url) {
    const overrides = defined({ db: client.db, username: client.username, password: client.password, tls: client.tls ? true : undefined })
    return { url: fromUrlString(client.url, overrides), tls }
  }
  const url = build(defined({
    host: client.host,
    port: client.port,
    path: client.path,
    db: client.db,
    username: client.username,
    password: client.password,
    tls: client.tls ? true : undefined,
  }))
  return { url, tls }
}

module.exports = { toRedisUrl, toRedisTarget }
