'use strict'
// A Sentinel-managed primary (one replica, three sentinels, all throwaway) failing over
// (SENTINEL FAILOVER) while processes take turns on a key and a lock is kept alive by its
// heartbeat, every grant and extension acknowledged by the replica (waitReplicas: 1).

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawn, execFileSync } = require('node:child_process')
const path = require('node:path')
const Redis = require('ioredis')
const { connect } = require('..')
const { prefix, eventually, sleep, blackhole } = require('./helpers')
const { startRedisSentinel, startRedis } = require('./fixtures/redis-server')

/** A turns.js worker that tolerates store failures; `children` collects it for clean-up. */
function turns(target, key, counterUrl, children) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'turns.js'), JSON.stringify(target), key, '0', counterUrl], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, TURNS_TOLERATE: '1' } })
    children.push(child)
    let out = ''
    child.stdout.setEncoding('utf8')
    child.stdout.on('data', (d) => { out += d })
    child.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`worker exited with ${code}`))))
  })
}

function linkUp(port) {
  try {
    return execFileSync('redis-cli', ['-p', String(port), 'info', 'replication'], { encoding: 'utf8' }).includes('master_link_status:up')
  } catch {
    return false // the failover closes connections
  }
}

test('a failover under load: no overlap, holders keep their lock or hear it lost, and locks, heartbeats and wake-ups work on the new primary', async (t) => {
  const sentinel = await startRedisSentinel(t, 1)
  if (!sentinel) return
  const counter = await startRedis()
  const target = { sentinels: sentinel.urls, name: sentinel.name, waitReplicas: 1, waitTimeout: 300 }
  const locks = await connect(target, { responseTimeout: 1000 })
  // Another engine (other options), as another process would be.
  const other = await connect(target, { responseTimeout: 1500 })
  const r = new Redis(counter.url)
  const children = []
  try {
    const k = prefix('sentinel') + 'turns'
    let lost = null
    const kept = await locks.acquire(prefix('sentinel') + 'kept', { ttl: 2000, autoExtend: true, extendEvery: 200, onLost: (e) => { lost = e } })
    const runs = [0, 1, 2].map(() => turns(target, k, counter.url, children))
    while (Number(await r.get(`${k}:seq`)) < 50) await new Promise((res) => setTimeout(res, 20))
    const [old, replica] = sentinel.servers
    await sentinel.failover()
    await eventually(async () => (await sentinel.primaryPort()) === replica.port, 10_000, 'the replica to be promoted')
    await eventually(() => linkUp(old.port), 20_000, 'the old primary to follow the new one')
    const before = Number(await r.get(`${k}:seq`))
    await eventually(async () => Number(await r.get(`${k}:seq`)) >= before + 50, 30_000, '50 more turns')
    await r.set(`${k}:stop`, '1')
    const lines = (await Promise.all(runs)).join('').trim().split('\n').filter((l) => l !== 'error')
    assert.equal(lines.filter((l) => l.startsWith('lost')).length, 0, 'no turn outlived its lock')
    const sections = lines.map((l) => l.split(' ')).map(([seq, token, inside]) => ({ seq: Number(seq), token: BigInt(token), inside: Number(inside) }))
    assert.ok(sections.every((s) => s.inside === 1), 'nobody else was inside')
    sections.sort((a, b) => a.seq - b.seq)
    for (let i = 1; i < sections.length; i++) assert.ok(sections[i].token > sections[i - 1].token)
    // The heartbeat's lock: still held and the new primary agrees, or visibly lost.
    if (lost === null) {
      assert.equal(kept.held, true)
      assert.equal((await locks.inspect(kept.key)).owner, kept.owner)
      assert.equal(await kept.release(), true)
    } else {
      assert.equal(kept.held, false)
      assert.equal(kept.signal.aborted, true)
    }
    // Locks and wake-ups on the new primary: a waiter in the other engine, polling only every
    // 5 s, is woken by the release.
    const k2 = prefix('sentinel') + 'after'
    const first = await locks.acquire(k2)
    const waiting = other.acquire(k2, { wait: 10_000, retryDelay: 5000, jitter: 0 })
    await eventually(() => other.stats().waiting === 1, 5000, 'the waiter to queue')
    const releasedAt = Date.now()
    await first.release()
    const second = await waiting
    assert.ok(Date.now() - releasedAt < 2500, 'woken by the release, not by the 5 s poll')
    assert.ok(second.fencingToken > first.fencingToken)
    await second.release()
  } finally {
    for (const child of children) child.kill('SIGKILL')
    r.disconnect()
    await locks.close()
    await other.close()
    await counter.kill()
    await sentinel.stop()
  }
})

/** A plain client of one throwaway server, quiet when it goes away. */
function raw(server) {
  const c = new Redis(server.url, { maxRetriesPerRequest: 1, enableOfflineQueue: true })
  c.on('error', () => {})
  return c
}

/** `fn()`, or false if it threw (a server paused or failing over). */
/** Checks a rejection: a store failure whose cause is a timeout, the call's bound. */
function timedOut(e) {
  assert.equal(e.code, 'ERR_LOCK_BACKEND', e.message)
  assert.equal(e.cause?.code, 'ERR_LOCK_STORE_TIMEOUT', e.cause?.message)
  return true
}
const quietly = (fn) => async () => { try { return await fn() } catch { return false } }

test('tokens never repeat or go back across two quick failovers, the second to a replica that missed the first one\'s history', async (t) => {
  // A primary (never promoted again once demoted: priority 0), B (promoted first) and C
  // (priority 200: second choice), which cannot follow B (a wrong masterauth, set once it
  // follows A): when B stops, the sentinels promote C with A's history only.
  const sentinel = await startRedisSentinel(t, 2, { args: [['--replica-priority', '0'], [], ['--replica-priority', '200']] })
  if (!sentinel) return
  const [a, b, c] = sentinel.servers
  const [ra, rc] = [raw(a), raw(c)]
  const target = { sentinels: sentinel.urls, name: sentinel.name }
  // Two engines, as two processes would be, each taking turns on its own key.
  const engines = [await connect(target, { connectTimeout: 500, responseTimeout: 500 }), await connect(target, { connectTimeout: 500, responseTimeout: 500 })]
  const keys = engines.map((_, i) => prefix('sentinel') + `double${i}`)
  const tokens = keys.map(() => [])
  const state = { stop: false, paused: false, idle: 0 }
  const loops = engines.map((locks, i) => (async () => {
    while (!state.stop) {
      if (state.paused) {
        state.idle |= 1 << i
        await sleep(10)
        continue
      }
      state.idle &= ~(1 << i)
      try {
        const lock = await locks.tryAcquire(keys[i], { ttl: 2000 })
        if (lock !== null) {
          tokens[i].push(lock.fencingToken)
          await lock.release().catch(() => {})
        }
      } catch {
        await sleep(20) // a failover in progress
      }
    }
  })())
  const grants = (more) => {
    const base = tokens.map((l) => l.length)
    return eventually(() => tokens.every((l, i) => l.length >= base[i] + more), 30_000, `${more} more grants each`)
  }
  const port = (info) => Number(/master_port:(\d+)/.exec(info)?.[1])
  try {
    await grants(20)
    // Paused, every replica has it all; then C cannot follow anyone else.
    state.paused = true
    await eventually(() => state.idle === 3, 5000, 'the loops to pause')
    assert.equal(await ra.wait(2, 5000), 2)
    await rc.config('SET', 'masterauth', 'not-the-password')
    await sentinel.failover()
    await eventually(quietly(async () => (await sentinel.primaryPort()) === b.port), 15_000, 'B to be promoted')
    await eventually(quietly(async () => port(await rc.info('replication')) === b.port), 15_000, 'C to be told to follow B')
    // The sentinels demote the old primary seconds later; done by hand here.
    await ra.replicaof('127.0.0.1', b.port)
    state.paused = false
    await grants(20) // on B, the clients switched by READONLY
    b.pause()
    try {
      await eventually(quietly(async () => (await sentinel.primaryPort()) === c.port), 20_000, 'C to be promoted')
    } finally {
      b.resume()
    }
    await grants(20) // on C
  } finally {
    state.stop = true
    await Promise.all(loops)
    ra.disconnect()
    rc.disconnect()
    for (const locks of engines) await locks.close()
    await sentinel.stop()
  }
  for (const [i, list] of tokens.entries()) {
    for (let j = 1; j < list.length; j++) {
      assert.ok(list[j] > list[j - 1], `key ${i}: token ${list[j]} granted after ${list[j - 1]} (grant ${j} of ${list.length})`)
    }
  }
})

test('a call to a stopped primary fails with a timeout while the primary is still stopped', { timeout: 60_000 }, async (t) => {
  // No replica: with one, the sentinels promote it a second after the pause (their
  // down-after-milliseconds), and a later call is rightly granted by the new primary.
  const sentinel = await startRedisSentinel(t, 0)
  if (!sentinel) return
  // Lazy: the first grant below retries the look-up, which a loaded machine can take past
  // the 1 s that connect() would give it.
  const locks = await connect({ sentinels: sentinel.urls, name: sentinel.name }, { lazy: true, connectTimeout: 500, responseTimeout: 500 })
  const key = prefix('sentinel') + 'stopped'
  const [primary] = sentinel.servers
  try {
    // Connected, and the primary readied (its counters lifted: one script over 16 384 keys,
    // which a loaded machine can take past 500 ms once).
    await eventually(quietly(async () => (await (await locks.acquire(key, { ttl: 5000 })).release()) === true), 10_000, 'a first grant')
    primary.pause()
    // The primary is resumed only once every call has failed: a call that waited for it (no
    // bound) would never end, and the test's own timeout would fail it. Each ends by the
    // call's deadline (cause ERR_LOCK_STORE_TIMEOUT), the sentinels' look-up in between.
    for (const call of [() => locks.tryAcquire(key, { ttl: 5000 }), () => locks.inspect(key), () => locks.tryAcquire(key, { ttl: 5000 })]) {
      await assert.rejects(call(), timedOut)
    }
  } finally {
    primary.resume()
    await locks.close()
    await sentinel.stop()
  }
})

test('a server that only a minority of the sentinels name as the primary in an epoch is not used, so two servers named in one epoch never draw the same token', async (t) => {
  // As while a SENTINEL FAILOVER crosses a failover of the sentinels' own (the fault
  // harness, seeds 6139 and 6177): one sentinel names server P in epoch 5, two name server
  // Q in epoch 5. Each is a primary of its own; the sentinels of P and of Q never meet.
  const [p, q] = (await startRedisServersOrSkip(t, 2)) ?? []
  if (!p) return
  const fs = require('node:fs')
  const os = require('node:os')
  const { live } = require('./fixtures/processes')
  const { freePort, answers } = require('./helpers')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-sentinel-epoch-'))
  const sentinels = []
  try {
    for (const server of [p, q, q]) {
      const port = await freePort()
      const conf = path.join(dir, `sentinel-${port}.conf`)
      fs.writeFileSync(conf, [`port ${port}`, 'bind 127.0.0.1', `dir ${dir}`, `sentinel monitor mymaster 127.0.0.1 ${server.port} 2`,
        'sentinel config-epoch mymaster 5', 'sentinel down-after-milliseconds mymaster 60000', ''].join('\n'))
      const proc = spawn('redis-server', [conf, '--sentinel'], { stdio: 'ignore' })
      live.add(proc)
      sentinels.push({ url: `redis://127.0.0.1:${port}`, proc })
      await eventually(() => answers(port), 5000, `sentinel ${port}`)
    }
    const [s0, s1, s2] = sentinels.map((s) => s.url)
    const key = prefix('sentinel') + 'one-epoch'
    const onQ = await connect({ sentinels: [s1, s0, s2], name: 'mymaster' })
    const lock = await onQ.acquire(key)
    try {
      // Through s0 first, the client is told P; before, it lifted P into epoch 5's band too
      // and drew the very token Q had just granted.
      await assert.rejects(async () => {
        const onP = await connect({ sentinels: [s0, s1, s2], name: 'mymaster' }, { connectTimeout: 1000, responseTimeout: 1000 })
        try {
          const other = await onP.acquire(key)
          assert.fail(`granted ${other.fencingToken} on P while Q granted ${lock.fencingToken}`)
        } finally {
          await onP.close()
        }
      }, (err) => err.code !== 'ERR_ASSERTION')
    } finally {
      await lock.release()
      await onQ.close()
    }
  } finally {
    for (const s of sentinels) s.proc.kill('SIGKILL')
    await p.kill()
    await q.kill()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

/** `n` throwaway redis-servers, or null (the test skipped) when redis-server is missing. */
function startRedisServersOrSkip(t, n) {
  return require('./fixtures/redis-server').startRedisServers(t, n)
}

test('the sentinels\' look-up is bounded by the call\'s own deadline, not by the sentinel client\'s timeouts', { timeout: 60_000 }, async () => {
  // Sentinels that accept connections and never answer (stopped ones). redis-rs's sentinel
  // client gives up on each after its own response timeout (500 ms), which would reject the
  // call as ERR_LOCK_STORE_UNREACHABLE; the call's deadline (connectTimeout +
  // responseTimeout, 2 ms here) ends the look-up first and rejects it as a timeout. No clock
  // is read: the two outcomes differ in their code.
  const holes = await Promise.all([blackhole(), blackhole(), blackhole()])
  const locks = await connect({ sentinels: holes.map((h) => `redis://127.0.0.1:${h.port}`), name: 'mymaster' }, { lazy: true, connectTimeout: 1, responseTimeout: 1 })
  try {
    const key = prefix('sentinel') + 'unanswered'
    for (const call of [() => locks.tryAcquire(key, { ttl: 5000 }), () => locks.inspect(key)]) {
      await assert.rejects(call(), timedOut)
    }
  } finally {
    await locks.close()
    for (const h of holes) h.close()
  }
})
