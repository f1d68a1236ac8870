'use strict'
// Operator views on a Redis that other applications share: `list` (API and CLI, which `top`
// and the dashboard read through) shows deadbolt's locks and nothing else, whatever other
// keys the database holds; a name that holds another kind of data is refused in words and
// never changed. On throwaway servers: one server, a cluster (every primary) and Redlock.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const path = require('node:path')
const Redis = require('ioredis')
const { connect } = require('..')
const redislock = require('../redislock')
const { prefix } = require('./helpers')
const { startRedis, startRedisCluster } = require('./fixtures/redis-server')

const BIN = path.join(__dirname, '..', 'bin', 'deadbolt.js')

/** Another application's data under `p`: every kind of key, with and without a ttl. */
async function foreignKeys(raw, p) {
  await raw.set(`${p}plain`, 'a cache entry')
  await raw.set(`${p}cached`, 'expires', 'PX', 60_000)
  await raw.set(`${p}uuid-ish`, 'not-a-uuid-but-36-characters-long!!', 'PX', 60_000)
  await raw.hset(`${p}session`, 'user', '42')
  await raw.hset(`${p}session-ttl`, 'user', '43')
  await raw.pexpire(`${p}session-ttl`, 60_000)
  await raw.sadd(`${p}set`, 'a')
  await raw.zadd(`${p}zset`, 1, 'a')
  await raw.rpush(`${p}list`, 'a')
  await raw.xadd(`${p}stream`, '*', 'f', 'v')
  return 10
}

/** Starts a throwaway server and a raw client on it; stops both when the test ends. */
async function server(t) {
  const s = await startRedis()
  const raw = new Redis(s.url)
  t.after(async () => { raw.disconnect(); await s.kill() })
  return { url: s.url, raw }
}

test('list shows only the locks on a Redis full of other applications\' keys of every kind', async (t) => {
  const { url, raw } = await server(t)
  const p = prefix('shared')
  await foreignKeys(raw, p)
  const locks = await connect(url)
  const rl = redislock.createLock(raw)
  try {
    const held = [await locks.acquire(`${p}a`), await locks.acquire(`${p}b`, { fencing: false }), await locks.acquire(`${p}c`, { data: 'x' })]
    await rl.acquire(`${p}d`)
    const listed = (await locks.list(p)).map((l) => l.key).sort()
    assert.deepEqual(listed, [`${p}a`, `${p}b`, `${p}c`, `${p}d`])
    for (const l of held) await l.release()
    await rl.release()
  } finally {
    await locks.close()
  }
})

test('the CLI lists the locks of a shared Redis without failing on other keys', async (t) => {
  const { url, raw } = await server(t)
  const p = prefix('shared')
  await foreignKeys(raw, p)
  const locks = await connect(url)
  try {
    const lock = await locks.acquire(`${p}held`)
    const r = spawnSync(process.execPath, [BIN, 'list', url, p, '--json'], { encoding: 'utf8', timeout: 30_000 })
    assert.equal(r.status, 0, r.stderr)
    assert.deepEqual(JSON.parse(r.stdout).map((l) => l.key), [`${p}held`])
    await lock.release()
  } finally {
    await locks.close()
  }
})

for (const [kind, make, read] of [
  ['hash', (raw, k) => raw.hset(k, 'user', '42'), (raw, k) => raw.hgetall(k)],
  ['list', (raw, k) => raw.rpush(k, 'a', 'b'), (raw, k) => raw.lrange(k, 0, -1)],
  ['zset', (raw, k) => raw.zadd(k, 1, 'a'), (raw, k) => raw.zrange(k, 0, -1)],
]) {
  test(`a name that holds a ${kind} is refused by inspect, acquire and forceRelease in words, and left unchanged`, async (t) => {
    const { url, raw } = await server(t)
    const k = prefix('shared') + kind
    await make(raw, k)
    const before = await read(raw, k)
    const locks = await connect(url)
    try {
      for (const call of [() => locks.inspect(k), () => locks.tryAcquire(k), () => locks.tryAcquire(k, { fencing: false }), () => locks.acquire(k, { wait: 200 }), () => locks.forceRelease(k)]) {
        await assert.rejects(call(), (err) => {
          assert.equal(err.cause?.code, 'ERR_LOCK_STORE_WRONG_TYPE')
          assert.ok(err.message.includes(JSON.stringify(k)), err.message)
          assert.ok(err.message.includes(`Redis ${kind}`), err.message)
          return true
        })
      }
      assert.equal(await raw.type(k), kind)
      assert.deepEqual(await read(raw, k), before)
    } finally {
      await locks.close()
    }
  })
}

test('on a cluster, list shows only the locks of every primary among other applications\' keys', async (t) => {
  const cluster = await startRedisCluster(t, 3)
  if (!cluster) return
  t.after(() => cluster.stop())
  const raw = new Redis.Cluster(cluster.urls.map((u) => ({ host: '127.0.0.1', port: Number(new URL(u).port) })))
  t.after(() => raw.disconnect())
  const p = prefix('shared')
  // Keys spread over the slots, so every primary holds some of each.
  for (let i = 0; i < 6; i++) await foreignKeys(raw, `${p}${i}:`)
  const locks = await connect({ cluster: cluster.urls })
  try {
    const keys = Array.from({ length: 6 }, (_, i) => `${p}${i}:lock`)
    const held = await Promise.all(keys.map((k) => locks.acquire(k)))
    assert.deepEqual((await locks.list(p)).map((l) => l.key).sort(), keys.sort())
    for (const l of held) await l.release()
  } finally {
    await locks.close()
  }
})

test('on Redlock, list shows only the locks when the servers hold other applications\' keys', async (t) => {
  const servers = [await server(t), await server(t), await server(t)]
  const p = prefix('shared')
  for (const s of servers) await foreignKeys(s.raw, p)
  const locks = await connect(servers.map((s) => s.url))
  try {
    const lock = await locks.acquire(`${p}lock`)
    assert.deepEqual((await locks.list(p)).map((l) => l.key), [`${p}lock`])
    await lock.release()
  } finally {
    await locks.close()
  }
})
