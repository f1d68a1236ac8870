'use strict'
// The Redis deployments that take more than one URL, named by the shape of connect()'s first
// argument: an array of URLs is Redlock over independent servers, { cluster: [urls] } a Redis
// Cluster by its seed nodes, { sentinels: [urls], name } the primary Redis Sentinel names. Checked here, before any I/O; a URL is never echoed in an error
// (it may hold a password), only its position.

const v = require('./validate')
const { redactUrl, secretsOf } = require('./redact')

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

/** The keys each object form of connect()'s first argument takes. */
const FORMS = {
  cluster: new Set(['cluster']),
  sentinels: new Set(['sentinels', 'name', 'username', 'password', 'waitReplicas', 'waitTimeout']),
}

/**
 * What the native side needs for connect()'s first argument: `{ url, topology, where }`, where
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
    throw v.typeError('url', 'a URL, an array of Redis URLs (Redlock), { cluster: [...] } or { sentinels: [...], name }', target)
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

/** `{ url, topology, where }` for connect()'s first argument, already checked. */
function targetOf(target) {
  return multiServer(target) ?? { url: target, topology: undefined, where: redactUrl(target) }
}

/** Every secret of a target's URLs, longest first. */
function secretsOfTarget(url, topology) {
  const all = [url, ...(topology?.servers ?? [])].flatMap(secretsOf)
  if (typeof topology?.password === 'string' && topology.password !== '') all.push(topology.password)
  return [...new Set(all)].sort((a, b) => b.length - a.length)
}

module.exports = { multiServer, targetOf, secretsOfTarget }
