'use strict'
// What the redis-semaphore 5.8 face sends to Redis, through the caller's own client (ioredis,
// ioredis-mock or node-redis 4/5, single or cluster). The keys, values and data layout are
// redis-semaphore's, so the original and the face exclude each other on the same keys:
//
// - a mutex is the string key `mutex:<key>` holding the lock's identifier, set with
//   `SET key id PX lockTimeout NX`; refresh re-arms PEXPIRE and release DELs it, each only while
//   the key still holds the identifier;
// - a semaphore is the sorted set `semaphore:<key>`: one member per permit, scored by the
//   holder's clock (ms) at its last acquire or refresh. Members older than lockTimeout are
//   expired by whoever looks next; the whole key also carries PEXPIRE lockTimeout. A
//   Semaphore holds one member, its identifier; a MultiSemaphore with `permits` n holds the n
//   members `<identifier>_0` … `<identifier>_<n-1>`, all or none.
//
// The scripts are deadbolt's own text (their SHA1s differ from the original's, which only
// means each package caches its own); their effect on the data is the original's.

const { createHash } = require('crypto')
const { batchWrites } = require('./redlock-wire')

/** Sets the remaining life of a mutex held by ARGV[1] to ARGV[2] ms: 1, or 0 if not held. */
const MUTEX_REFRESH = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`

/** Deletes a mutex held by ARGV[1]: 1, or 0 if it holds anything else (or nothing). */
const MUTEX_RELEASE = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
return redis.call('DEL', KEYS[1])`

/**
 * Takes the members ARGV[4..] of a semaphore with ARGV[1] permits (limit), ARGV[2] ms lock
 * timeout, at time ARGV[3] ms: 1 when all fit after expiring stale members, else 0.
 */
const SEMAPHORE_ACQUIRE = `
local limit = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local wanted = #ARGV - 3
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
if redis.call('ZCARD', KEYS[1]) + wanted > limit then
  return 0
end
for i = 4, #ARGV do
  redis.call('ZADD', KEYS[1], now, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], ttl)
return 1`

/**
 * Re-scores the members ARGV[4..] at ARGV[3] ms, if the first of them is still there after
 * expiring stale members (ARGV[1], the limit, is unused but kept for the same call shape).
 */
const SEMAPHORE_REFRESH = `
local ttl = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
if not redis.call('ZSCORE', KEYS[1], ARGV[4]) then
  return 0
end
for i = 4, #ARGV do
  redis.call('ZADD', KEYS[1], now, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], ttl)
return 1`

/** Removes the members ARGV[1..]: how many were there. */
const SEMAPHORE_RELEASE = `
local removed = 0
for i = 1, #ARGV do
  removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
end
return removed`

const SCRIPTS = { MUTEX_REFRESH, MUTEX_RELEASE, SEMAPHORE_ACQUIRE, SEMAPHORE_REFRESH, SEMAPHORE_RELEASE }
const SHA = Object.fromEntries(Object.entries(SCRIPTS).map(([name, text]) => [name, createHash('sha1').update(text).digest('hex')]))

/** An ioredis-style client (ioredis, its Cluster, ioredis-mock): evalsha/eval/set methods. */
function isIoredisLike(client) {
  return typeof client.evalsha === 'function' && typeof client.eval === 'function' && typeof client.set === 'function'
}

/** A node-redis 4/5 client or cluster: sendCommand. */
function isNodeRedis(client) {
  return typeof client.sendCommand === 'function'
}

/** True when `client` is a Redis client the face can drive. */
function isClient(client) {
  return client !== null && typeof client === 'object' && (isIoredisLike(client) || isNodeRedis(client))
}

/** Sends `args` (strings) through a node-redis client or cluster (routed by `key`). */
function send(client, key, args) {
  // A node-redis cluster's sendCommand takes the key that picks the shard first.
  if (typeof client.getSlotMaster === 'function' || Array.isArray(client.masters)) return client.sendCommand(key, false, args)
  return client.sendCommand(args)
}

function isNoScript(err) {
  return String(err?.message ?? err).includes('NOSCRIPT')
}

/** Runs script `name` on `key` with `args` (EVALSHA, then EVAL once the server lacks it). */
async function run(client, name, key, args) {
  const argv = args.map(String)
  if (isIoredisLike(client)) {
    batchWrites(client)
    try {
      return await client.evalsha(SHA[name], 1, key, ...argv)
    } catch (err) {
      if (!isNoScript(err)) throw err
      batchWrites(client)
      return client.eval(SCRIPTS[name], 1, key, ...argv)
    }
  }
  try {
    return await send(client, key, ['EVALSHA', SHA[name], '1', key, ...argv])
  } catch (err) {
    if (!isNoScript(err)) throw err
    return send(client, key, ['EVAL', SCRIPTS[name], '1', key, ...argv])
  }
}

/** `SET key value PX ms NX`: true when set. */
async function setNx(client, key, value, ms) {
  if (isIoredisLike(client)) batchWrites(client)
  const reply = isIoredisLike(client)
    ? await client.set(key, value, 'PX', ms, 'NX')
    : await send(client, key, ['SET', key, value, 'PX', String(ms), 'NX'])
  return reply === 'OK'
}

/** A script's integer reply as a boolean (`+` for clients that return numbers as strings). */
function one(reply) {
  return +reply === 1
}

/** The single-server operations, each returning whether it took effect. */
const ops = {
  mutexAcquire: (client, key, id, ttl) => setNx(client, key, id, ttl),
  mutexRefresh: async (client, key, id, ttl) => one(await run(client, 'MUTEX_REFRESH', key, [id, ttl])),
  mutexRelease: async (client, key, id) => one(await run(client, 'MUTEX_RELEASE', key, [id])),
  semaphoreAcquire: async (client, key, members, limit, ttl, now) => one(await run(client, 'SEMAPHORE_ACQUIRE', key, [limit, ttl, now, ...members])),
  semaphoreRefresh: async (client, key, members, limit, ttl, now) => one(await run(client, 'SEMAPHORE_REFRESH', key, [limit, ttl, now, ...members])),
  semaphoreRelease: async (client, key, members) => +(await run(client, 'SEMAPHORE_RELEASE', key, members)) > 0,
}

module.exports = { ops, isClient, SCRIPTS }
