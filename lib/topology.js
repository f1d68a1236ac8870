'use strict'
// connect()'s first argument, parsed once into `{ url, topology, where, scheme, store }`: the
// client, the native bridge, the diagnostics and the drop-in faces all read that one object.
// A string is a store URL whose scheme the registry knows (lib/registry.js); the other shapes
// are the Redis deployments that take more than one URL: an array of URLs is Redlock over
// independent servers, { cluster: [urls] } a Redis Cluster by its seed nodes,
// { sentinels: [urls], name } the primary Redis Sentinel names. Checked here, before any I/O;
// a URL is never echoed in an error (it may hold a password), only its scheme or position.

const v = require('./validate')
const { redactUrl, secretsOf } = require('./redact')
const registry = require('./registry')

// The servers of a multi-server form are Redis servers over TCP, fewer schemes than the Redis
// store's (src/store/topology.rs checks the same).
const REDIS_TCP = /^rediss?:\/\//i

function invalid(name, reason) {
  const err = new TypeError(`The argument '${name}' ${reason}`)
  err.code = 'ERR_INVALID_ARG_VALUE'
  return err
}

/** Checks a list of Redis server URLs named `name` (1 to `max` of them). */
function checkServers(list, name, max) {
  if (!Array.isArray(list)) throw v.typeError(name, 'an array of redis:// or rediss:// URLs', list)
  if (list.length === 0 || list.length > max) {
    throw v.rangeError(`${name}.length`, `from 1 to ${max}`, list.length)
  }
  return list.map((url, i) => {
    if (typeof url !== 'string') throw v.typeError(`${name}[${i}]`, 'of type string', url)
    if (!REDIS_TCP.test(url)) throw invalid(`${name}[${i}]`, 'must be a redis:// or rediss:// URL')
    if (!url.isWellFormed()) throw invalid(`${name}[${i}]`, 'must not contain lone surrogates (they have no UTF-8 encoding)')
    return url
  })
}

/** What connect()'s first argument may be, for messages. */
const FORMS_TEXT = 'a URL, an array of Redis URLs (Redlock), { cluster: [...] } or { sentinels: [...], name }'

/** The keys each object form of connect()'s first argument takes. */
const FORMS = {
  cluster: new Set(['cluster']),
  sentinels: new Set(['sentinels', 'name', 'username', 'password', 'waitReplicas', 'waitTimeout']),
}

/**
 * A multi-server form's part of `parseTarget`: `{ url, topology, where }`, where
 * `url` names the store (for a multi-server form, a label that keys its engine),
 * `topology` is undefined or `{ kind, servers }`, and `where` is what util.inspect shows
 * (passwords masked). Returns null for anything that is not a multi-server form.
 */
function multiServer(target) {
  const max = v.LIMITS.maxRedisServers
  if (Array.isArray(target)) {
    const servers = checkServers(target, 'url', max)
    return {
      url: 'redlock:',
      topology: { kind: 'redlock', servers },
      where: `redlock(${servers.map(redactUrl).join(', ')})`,
    }
  }
  if (target === null || typeof target !== 'object') return null
  const form = Object.keys(FORMS).find((k) => Object.hasOwn(target, k))
  if (form === undefined) {
    throw v.typeError('url', FORMS_TEXT, target)
  }
  v.checkKnownKeys(target, FORMS[form], 'url')
  if (form === 'cluster') {
    const seeds = checkServers(target.cluster, 'url.cluster', max)
    return {
      url: 'redis-cluster:',
      topology: { kind: 'cluster', servers: seeds },
      where: `cluster(${seeds.map(redactUrl).join(', ')})`,
    }
  }
  const sentinels = checkServers(target.sentinels, 'url.sentinels', max)
  const { name, username, password, waitReplicas, waitTimeout } = target
  if (typeof name !== 'string') throw v.typeError('url.name', 'of type string', name)
  if (name.length === 0 || !name.isWellFormed()) throw invalid('url.name', 'must be a non-empty, well-formed string')
  if (username !== undefined && typeof username !== 'string') throw v.typeError('url.username', 'of type string', username)
  // Never echoed: a password.
  if (password !== undefined && typeof password !== 'string') throw invalid('url.password', 'must be a string')
  if (waitReplicas !== undefined) v.checkInt(waitReplicas, 'url.waitReplicas', 0, 1000)
  if (waitTimeout !== undefined) v.checkInt(waitTimeout, 'url.waitTimeout')
  return {
    url: 'redis-sentinel:',
    topology: { kind: 'sentinel', servers: sentinels, name, username, password, waitReplicas, waitTimeout },
    where: `sentinel(${JSON.stringify(name)} via ${sentinels.map(redactUrl).join(', ')})`,
  }
}

const SCHEMES_TEXT = registry.listed(registry.STORES.flatMap((e) => e.schemes))

/**
 * connect()'s first argument, checked and parsed (the only place that does either), frozen:
 * `url` names the store for the native side (for a multi-server form, a label that keys its
 * engine); `topology` is undefined or `{ kind, servers, … }`; `where` is what util.inspect
 * shows (passwords masked); `scheme` the URL's scheme, lower-cased (null for a multi-server
 * form); `store` the store's registry name, or `redlock` for an array of URLs (what the
 * diagnostics report). Throws a TypeError (ERR_INVALID_ARG_TYPE/VALUE) for anything else.
 */
function parseTarget(target) {
  const multi = multiServer(target)
  if (multi !== null) {
    const store = multi.topology.kind === 'redlock' ? 'redlock' : registry.byName('redis').name
    return Object.freeze({ ...multi, scheme: null, store })
  }
  if (typeof target !== 'string') throw v.typeError('url', FORMS_TEXT, target)
  const scheme = registry.schemeOf(target)
  const entry = registry.byScheme(scheme)
  if (entry === undefined) {
    // Named by its scheme only: the rest of a URL may hold a password.
    const shown = /^([a-z][a-z0-9+.-]*):/i.exec(target)?.[1]
    throw invalid('url', `must start with ${SCHEMES_TEXT}. Received ${shown ? `a URL with scheme "${shown}:"` : 'a string that is not a URL'}`)
  }
  // Not echoed: it may carry a password.
  if (!target.isWellFormed()) throw invalid('url', 'must not contain lone surrogates (they have no UTF-8 encoding)')
  return Object.freeze({ url: target, topology: undefined, where: redactUrl(target), scheme, store: entry.name })
}

/**
 * Every secret of a parsed target's URLs, longest first.
 * @param {{ url: string, topology?: { servers: string[], password?: string } }} target
 */
function secretsOfTarget({ url, topology }) {
  const all = [url, ...(topology?.servers ?? [])].flatMap(secretsOf)
  if (typeof topology?.password === 'string' && topology.password !== '') all.push(topology.password)
  return [...new Set(all)].sort((a, b) => b.length - a.length)
}

module.exports = { parseTarget, secretsOfTarget }
