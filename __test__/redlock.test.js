'use strict'
// Redlock over five throwaway servers: what only N independent servers have. Servers that
// are killed or paused, a partial grant undone, processes taking turns that never overlap,
// and tokens in the order the lock was held.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const path = require('node:path')
const Redis = require('ioredis')
const { connect, LockBackendError } = require('..')
const { prefix } = require('./helpers')
const { startRedisServers } = require('./fixtures/redis-server')

async function keysOn(servers, key) {
  return Promise.all(servers.map(async (s) => {
    const r = new Redis(s.url, { maxRetriesPerRequest: 1 })
    try { return await r.get(key) } finally { r.disconnect() }
  }))
}

async function stopAll(servers) {
  for (const s of servers) s.resume()
  await Promise.all(servers.map((s) => s.kill()))
}

test('locks keep working with 2 of 5 servers killed', async (t) => {
  const servers = await startRedisServers(t, 5)
  if (!servers) return
  const locks = await connect(servers.map((s) => s.url), { connectTimeout: 1000, responseTimeout: 1000 })
  try {
    await servers[1].kill()
    await servers[3].kill()
    const k = prefix('redlock') + 'k'
    const first = await locks.acquire(k, { ttl: 2000, autoExtend: true, extendEvery: 100 })
    assert.equal(first.held, true)
    await first.extend(3000)
    const waiting = locks.acquire(k, { wait: 10_000 })
    assert.equal(await first.release(), true)
    const second = await waiting
    assert.ok(second.fencingToken > first.fencingToken)
    assert.equal((await locks.inspect(k)).owner, second.owner)
    assert.equal(await second.release(), true)
    assert.equal(await locks.inspect(k), null)
  } finally {
    await locks.close()
    await stopAll(servers)
  }
})

test('with 3 of 5 servers down acquire rejects with LockBackendError within its wait and leaves no grant on the live ones', async (t) => {
  const servers = await startRedisServers(t, 5)
  if (!servers) return
  const locks = await connect(servers.map((s) => s.url), { connectTimeout: 1000, responseTimeout: 1000 })
  try {
    await Promise.all([servers[0].kill(), servers[2].kill(), servers[4].kill()])
    const k = prefix('redlock') + 'down'
    const wait = 5000
    const started = Date.now()
    await assert.rejects(locks.acquire(k, { wait }), (err) => {
      assert.ok(err instanceof LockBackendError, err.stack)
      assert.equal(err.cause.code, 'ERR_LOCK_STORE_UNREACHABLE')
      return true
    })
    assert.ok(Date.now() - started < wait, 'rejected within its wait')
    assert.deepEqual(await keysOn([servers[1], servers[3]], k), [null, null])
  } finally {
    await locks.close()
    await stopAll(servers)
  }
})

test('paused servers (SIGSTOP) never hold up a quorum, and a paused majority fails as a timeout within twice the per-server bound', async (t) => {
  const servers = await startRedisServers(t, 5)
  if (!servers) return
  // A minute of responseTimeout: only the per-server bound (a tenth of the ttl) can end a
  // wait for a paused server.
  const locks = await connect(servers.map((s) => s.url), { connectTimeout: 60_000, responseTimeout: 60_000 })
  try {
    servers[0].pause()
    servers[4].pause()
    const k = prefix('redlock') + 'paused'
    const lock = await locks.acquire(k, { ttl: 10_000 })
    await lock.extend(10_000)
    assert.equal(await lock.release(), true)
    servers[2].pause()
    const ttl = 3000
    const started = Date.now()
    await assert.rejects(locks.acquire(k, { ttl, wait: 0 }), (err) => {
      assert.ok(err instanceof LockBackendError, err.stack)
      assert.equal(err.cause.code, 'ERR_LOCK_STORE_TIMEOUT')
      return true
    })
    const took = Date.now() - started
    assert.ok(took < 2 * (ttl / 10), `failed after ${took} ms`)
    assert.deepEqual(await keysOn([servers[1], servers[3]], k), [null, null])
  } finally {
    await locks.close()
    await stopAll(servers)
  }
})

test('3 processes × 100 critical sections on one key never overlap, a server killed half way, and tokens follow the order of holding', async (t) => {
  const all = await startRedisServers(t, 6)
  if (!all) return
  const [counter, ...servers] = all
  const k = prefix('redlock') + 'turns'
  try {
    const runs = [0, 1, 2].map(() => new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'turns.js'), JSON.stringify(servers.map((s) => s.url)), k, '100', counter.url], { stdio: ['ignore', 'pipe', 'inherit'] })
      let out = ''
      child.stdout.setEncoding('utf8')
      child.stdout.on('data', (d) => { out += d })
      child.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`worker exited with ${code}`))))
    }))
    const r = new Redis(counter.url)
    while (Number(await r.get(`${k}:seq`)) < 100) await new Promise((res) => setTimeout(res, 20))
    r.disconnect()
    await servers[2].kill()
    const lines = (await Promise.all(runs)).join('').trim().split('\n')
    assert.equal(lines.filter((l) => l.startsWith('lost')).length, 0, 'no holder lost its lock')
    const sections = lines.map((l) => l.split(' ')).map(([seq, token, inside]) => ({ seq: Number(seq), token: BigInt(token), inside: Number(inside) }))
    assert.equal(sections.length, 300)
    assert.ok(sections.every((s) => s.inside === 1), 'nobody else was inside')
    sections.sort((a, b) => a.seq - b.seq)
    for (let i = 1; i < sections.length; i++) {
      assert.ok(sections[i].token > sections[i - 1].token, `token ${sections[i].token} after ${sections[i - 1].token}`)
    }
  } finally {
    await stopAll(all)
  }
})

// Redlock's answer to a server whose clock jumps (docs/stores/redis.md, "What Redlock
// assumes"): the jump ends that server's leases early, and the other servers' still count.
// One server of three runs under the fault harness's clock shim.
test('a lock and a semaphore\'s permits stay with their holders when one server\'s clock jumps an hour forward', async (t) => {
  const { clockShimLib, ClockShim } = require('../jepsen/clock')
  const { ThrowawayRedis } = require('../torture/servers')
  if (!ThrowawayRedis.available() || clockShimLib() === null) {
    const msg = 'redis-server or a C compiler (cc) is not installed (scripts/services.sh tools)'
    if (process.env.CI) throw new Error(msg)
    return t.skip(msg)
  }
  const clock = new ClockShim()
  const servers = [await ThrowawayRedis.create({ env: clock.env() }), await ThrowawayRedis.create(), await ThrowawayRedis.create()]
  const urls = servers.map((s) => s.url)
  const opts = { connectTimeout: 1000, responseTimeout: 1000 }
  const [holder, other] = [await connect(urls, opts), await connect(urls, opts)]
  try {
    const k = prefix('redlock-clock')
    const lock = await holder.acquire(`${k}lock`, { ttl: 60_000 })
    const permits = await Promise.all([0, 1].map(() => holder.semaphore(`${k}sem`, { limit: 2 }).acquire({ ttl: 60_000 })))
    const [jumped] = servers
    const r = new Redis(jumped.url, { maxRetriesPerRequest: 1 })
    const [before] = await r.time()
    clock.jump(3_600_000)
    const [after] = await r.time()
    r.disconnect()
    assert.ok(Number(after) - Number(before) >= 3600, 'the first server\'s clock jumped')
    // That server's grants ran out with its hour; a majority still holds the lock, and two
    // of three servers still count both permits: a third needs all three.
    assert.equal(await other.tryAcquire(`${k}lock`), null, 'the lock is not granted again')
    assert.equal(await other.semaphore(`${k}sem`, { limit: 2 }).tryAcquire(), null, 'no third permit holder')
    await lock.extend(60_000) // two of three servers extend it (a refusal would reject)
    assert.equal((await other.inspect(`${k}lock`)).owner, lock.owner)
    assert.equal(lock.held, true)
    // 2 permits of 3 servers need all 3 (the permit quorum): the jumped server no longer counts
    // them, so an extension is refused and the holder hears the loss, loudly.
    await assert.rejects(permits[0].extend(60_000), { code: 'ERR_LOCK_EXTEND' })
    assert.equal(permits[0].held, false)
    await permits[1].release()
    assert.equal(await lock.release(), true)
  } finally {
    await holder.close()
    await other.close()
    for (const s of servers) await s.destroy()
    clock.destroy()
  }
})
