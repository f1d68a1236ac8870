'use strict'
// Nothing left behind by an acquisition whose reply came too late: the store granted it, the
// caller was told it failed (ERR_LOCK_STORE_TIMEOUT), and the grant's owner is known only to
// deadbolt. Its promise: after such a rejection the key is free again within (the time until
// the store answers again) + one response timeout. Each test plays the late reply with a relay
// that forwards requests at once and holds every reply back for HOLD ms (longer than the
// client's bound on a call: responseTimeout RT, and on SQL connectTimeout + RT), until the
// rejection; the store then answers again within HOLD. Or with a server stopped (SIGSTOP)
// during the call. A second client that reaches the store directly watches the key.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const deadbolt = require('..')
const { connect } = deadbolt
const { REDIS_URL, MYSQL_URL, PG_URL, needRedis, needMysql, needPg, prefix, closeRaw, sleep } = require('./helpers')
const { tcpProxy } = require('./fixtures/tcp-proxy')
const { startRedisServers } = require('./fixtures/redis-server')
const { sharedDynalite, TEST_CREDENTIALS } = require('./fixtures/dynalite')
const { sharedEtcd } = require('./fixtures/etcd')

const RT = 1000
const HOLD = 1500
const TTL = 8000

const dynalite = sharedDynalite()
const etcd = sharedEtcd()
after(async () => {
  closeRaw()
  await dynalite.stop()
  await etcd.stop()
})

function throughProxy(url, port) {
  const u = new URL(url)
  u.host = `127.0.0.1:${port}`
  return u.toString()
}

/**
 * Asserts that `promise` rejects because the store did not answer in time (a LockBackendError
 * whose cause is ERR_LOCK_STORE_TIMEOUT, or the redislock face's LockAcquisitionError around
 * one); resolves when it rejected.
 */
async function rejectsLate(promise) {
  await assert.rejects(promise, (err) => {
    let e = err
    while (e !== undefined && e.code !== 'ERR_LOCK_BACKEND') e = e.cause
    assert.equal(e?.cause?.code, 'ERR_LOCK_STORE_TIMEOUT', err.stack)
    return true
  })
  return Date.now()
}

/**
 * Polls `free()` until it is true; fails if it is still false once `deadline` (a Date.now()
 * instant: the promise's own bound) has passed.
 */
async function freeBy(free, deadline, what) {
  for (;;) {
    const checked = Date.now()
    if (await free()) return
    if (checked > deadline) assert.fail(`${what} was still taken ${checked - deadline} ms after the promised bound`)
    await sleep(20)
  }
}

// A SQL, DynamoDB or etcd call is bounded by connectTimeout + responseTimeout: their replies
// are held back longer than that.
const SQL = { connectTimeout: 1000 }
const SQL_HOLD = 2500
const DYNAMO = { ...SQL, credentials: TEST_CREDENTIALS }

/**
 * The single stores, each with a relay in front of it and a direct client beside it (`hold`:
 * how long replies are held back, when not HOLD).
 */
const STORES = [
  { name: 'Redis', url: () => REDIS_URL, need: needRedis },
  { name: 'MySQL', url: () => MYSQL_URL, need: needMysql, options: SQL, hold: SQL_HOLD },
  { name: 'PostgreSQL', url: () => PG_URL, need: needPg, options: SQL, hold: SQL_HOLD },
  {
    name: 'DynamoDB',
    url: () => dynalite.server.url(),
    port: () => dynalite.server.port,
    via: (port) => dynalite.server.url().replace(`:${dynalite.server.port}`, `:${port}`),
    options: DYNAMO,
    hold: SQL_HOLD,
    async need(t) {
      if (!(await dynalite.need(t))) return false
      const c = await connect(dynalite.server.url(), { ...DYNAMO, createTable: true })
      await c.close()
      return true
    },
  },
  {
    name: 'etcd',
    url: () => etcd.server.url(),
    port: () => etcd.server.members[0].clientPort,
    via: (port) => `etcd://127.0.0.1:${port}`,
    options: SQL,
    hold: SQL_HOLD,
    need: (t) => etcd.need(t),
  },
]

/**
 * Takes and releases a few locks at once through `client` (`take(client, key)`), so that a
 * SQL store's pool has connections open with its statements prepared: the late request is
 * then the one that takes the lock, not a connection's handshake or a PREPARE whose late
 * reply stops it before anything is written.
 */
async function warmUp(client, take) {
  const p = prefix('orphan-warm')
  const got = await Promise.all([0, 1, 2, 3].map((i) => take(client, `${p}${i}`)))
  await Promise.all(got.map((release) => (typeof release === 'function' ? release() : release.release())))
}

/**
 * Connects `late` through a relay to `store` and `direct` to the store itself, and runs `body`
 * with `late(call)`: calls `call(late)` (and releases what it got), then again with every
 * reply held back HOLD ms, expects it to
 * reject with a time-out, lets replies through again and resolves the instant by which the
 * promise says the key is free (the rejection + HOLD + RT). Closes everything.
 */
async function withLateStore(store, body) {
  const url = store.url()
  const options = store.options ?? {}
  const proxy = await tcpProxy(store.port ? store.port() : Number(new URL(url).port))
  const lateUrl = store.via ? store.via(proxy.port) : throughProxy(url, proxy.port)
  const hold = store.hold ?? HOLD
  let late = null
  let direct = null
  const lateCall = async (call) => {
    await warmUp(late, (c, k) => c.acquire(k))
    const first = await call(late)
    await first.release()
    proxy.holdReplies(hold)
    const rejected = await rejectsLate(call(late))
    proxy.holdReplies(0)
    return rejected + hold + RT
  }
  try {
    late = await connect(lateUrl, { ...options, responseTimeout: RT })
    direct = await connect(url, options)
    await body({ late: lateCall, direct, client: late, proxy })
  } finally {
    await proxy.close()
    await Promise.all([late?.close(), direct?.close()])
  }
}

for (const store of STORES) {
  test(`on ${store.name}, a lock granted after its acquire timed out is free again within the reply delay + one response timeout`, async (t) => {
    if (!(await store.need(t))) return
    await withLateStore(store, async ({ late, direct }) => {
      const key = prefix('orphan') + store.name
      const bound = await late((c) => c.acquire(key, { ttl: TTL, wait: 0 }))
      await freeBy(async () => (await direct.inspect(key)) === null, bound, key)
      // And it can be taken at once.
      const lock = await direct.tryAcquire(key)
      assert.ok(lock)
      await lock.release()
    })
  })
}

test('on Redis, tryAcquire whose reply is late leaves nothing behind', async (t) => {
  if (!(await needRedis(t))) return
  await withLateStore(STORES[0], async ({ late, direct }) => {
    const key = prefix('orphan-try') + 'k'
    const bound = await late((c) => c.tryAcquire(key, { ttl: TTL }))
    await freeBy(async () => (await direct.inspect(key)) === null, bound, key)
  })
})

// On Redis only: the SQL stores take permits in a transaction of several round trips, and a
// relay that holds every reply back stops it at the first (rolled back, nothing granted).
for (const store of STORES.slice(0, 1)) {
  test(`on ${store.name}, semaphore permits granted after their request timed out are given back`, async (t) => {
    if (!(await store.need(t))) return
    await withLateStore(store, async ({ late, direct }) => {
      const name = prefix('orphan-sem') + 's'
      const bound = await late((c) => c.semaphore(name, { limit: 2 }).acquire({ ttl: TTL, permits: 2, wait: 0 }))
      const sem = direct.semaphore(name, { limit: 2 })
      await freeBy(async () => (await sem.holders()).length === 0, bound, name)
    })
  })

  test(`on ${store.name}, a read-write lock's write hold granted after its request timed out is given back`, async (t) => {
    if (!(await store.need(t))) return
    await withLateStore(store, async ({ late, direct }) => {
      const name = prefix('orphan-rw') + 'rw'
      const bound = await late((c) => c.readWriteLock(name).write({ ttl: TTL, wait: 0 }))
      const rw = direct.readWriteLock(name)
      await freeBy(async () => (await rw.holders()).length === 0, bound, name)
    })
  })
}

test('on Redis, acquireAll whose first grant came too late holds none of its keys afterwards', async (t) => {
  if (!(await needRedis(t))) return
  await withLateStore(STORES[0], async ({ late, direct }) => {
    const p = prefix('orphan-all')
    const keys = [`${p}a`, `${p}b`]
    const bound = await late((c) => c.acquireAll(keys, { ttl: TTL, wait: 0 }))
    await freeBy(async () => (await Promise.all(keys.map((k) => direct.inspect(k)))).every((i) => i === null), bound, keys.join(', '))
  })
})

test('on Redis, an election resigned while its grant was late leaves no leader behind', async (t) => {
  if (!(await needRedis(t))) return
  await withLateStore(STORES[0], async ({ client, direct, proxy }) => {
    const name = prefix('orphan-elect') + 'e'
    proxy.holdReplies(HOLD)
    const election = client.elect(name, { ttl: TTL })
    // The campaign's request is on its way (the store grants it, the reply is held back).
    for (let i = 0; (await direct.leader(name)) === null; i++) {
      assert.ok(i < 1000, 'the campaign never reached the store')
      await sleep(5)
    }
    // Resigning waits for the campaign's acquisition, which fails with a time-out.
    await election.resign()
    proxy.holdReplies(0)
    const resigned = Date.now()
    assert.equal(election.isLeader, false)
    await freeBy(async () => (await direct.leader(name)) === null, resigned + HOLD + RT, name)
  })
})

test('on Redis, a grant whose reply came while the server was stopped is released once it runs again', async (t) => {
  const [server] = (await startRedisServers(t, 1)) ?? []
  if (!server) return
  const late = await connect(server.url, { responseTimeout: RT })
  const raw = await connect(server.url)
  try {
    const key = prefix('orphan-stop') + 'k'
    server.pause()
    await rejectsLate(late.acquire(key, { ttl: TTL, wait: 0 }))
    await sleep(300)
    server.resume()
    const resumed = Date.now()
    await freeBy(async () => (await raw.inspect(key)) === null, resumed + RT, key)
  } finally {
    server.resume()
    await Promise.all([late.close(), raw.close()])
    await server.kill()
  }
})

test('on Redlock, a grant that reached some servers only after the acquire gave up is released on every server', async (t) => {
  const servers = await startRedisServers(t, 3)
  if (!servers) return
  const proxies = await Promise.all(servers.map((s) => tcpProxy(s.port)))
  const late = await connect(proxies.map((p) => `redis://127.0.0.1:${p.port}`), { responseTimeout: RT })
  const Redis = require('ioredis')
  const raws = servers.map((s) => new Redis(s.port, '127.0.0.1'))
  try {
    const key = prefix('orphan-redlock') + 'k'
    // A quorum (2 of 3) answers late.
    proxies[0].holdReplies(HOLD)
    proxies[1].holdReplies(HOLD)
    const rejected = await rejectsLate(late.acquire(key, { ttl: TTL, wait: 0 }))
    await freeBy(async () => (await Promise.all(raws.map((r) => r.exists(key)))).every((n) => n === 0), rejected + HOLD + RT, key)
  } finally {
    for (const r of raws) r.disconnect()
    await Promise.all(proxies.map((p) => p.close()))
    await late.close()
    await Promise.all(servers.map((s) => s.kill()))
  }
})

test('on Redlock, what servers stopped during the acquire grant when they run again is released', async (t) => {
  const servers = await startRedisServers(t, 3)
  if (!servers) return
  const late = await connect(servers.map((s) => s.url), { responseTimeout: RT })
  const Redis = require('ioredis')
  const raws = servers.map((s) => new Redis(s.port, '127.0.0.1'))
  try {
    const key = prefix('orphan-redlock-stop') + 'k'
    await (await late.acquire(key, { ttl: TTL })).release()
    servers[0].pause()
    servers[1].pause()
    await rejectsLate(late.acquire(key, { ttl: TTL, wait: 0 }))
    await sleep(300)
    servers[0].resume()
    servers[1].resume()
    const resumed = Date.now()
    await freeBy(async () => (await Promise.all(raws.map((r) => r.exists(key)))).every((n) => n === 0), resumed + RT, key)
  } finally {
    for (const s of servers) s.resume()
    for (const r of raws) r.disconnect()
    await late.close()
    await Promise.all(servers.map((s) => s.kill()))
  }
})

test('the clean-up of a late grant never releases the lock another owner took meanwhile', async (t) => {
  if (!(await needRedis(t))) return
  // Replies held back far longer than the acquisition's lease: every release the clean-up
  // sends reaches Redis but none is ever answered, so it goes on until the lease is over.
  await withLateStore(STORES[0], async ({ client: late, direct, proxy }) => {
    const key = prefix('orphan-other') + 'k'
    const ttl = 2500
    proxy.holdReplies(60_000)
    await rejectsLate(late.acquire(key, { ttl, wait: 0 }))
    const other = await direct.acquire(key, { ttl: 30_000, wait: 10_000, retryDelay: 10 })
    // The clean-up ends (its lease from the send is over) having sent releases all along.
    await freeBy(() => late.stats().cleanups === 0, Date.now() + ttl + RT + 1000, 'the clean-up')
    assert.equal((await direct.inspect(key)).owner, other.owner)
    assert.equal(await other.release(), true)
  })
})

test('the redislock face: a lock whose acquire timed out after the grant leaves the key free', async (t) => {
  if (!(await needRedis(t))) return
  const direct = await connect(REDIS_URL)
  const proxy = await tcpProxy(6379)
  // The face reads only where the server is from the client: it never needs to connect.
  const redis = require('redis3').createClient({ host: '127.0.0.1', port: proxy.port, no_ready_check: true })
  redis.on('error', () => {})
  // The face's client has the default response timeout (5 s).
  const hold = 6000
  try {
    const key = prefix('orphan-face') + 'k'
    const lock = deadbolt.createLock(redis, { timeout: 30_000, retries: 0 })
    proxy.holdReplies(hold)
    const rejected = await rejectsLate(lock.acquire(key))
    proxy.holdReplies(0)
    await freeBy(async () => (await direct.inspect(key)) === null, rejected + hold + 5000, key)
  } finally {
    redis.end(false)
    await proxy.close()
    await direct.close()
  }
})

test('the sql-lock face: a getLock that timed out after the grant leaves the key free', async (t) => {
  if (!(await needMysql(t))) return
  const direct = await connect(MYSQL_URL)
  const proxy = await tcpProxy(Number(new URL(MYSQL_URL).port))
  // The face's calls are bounded by connectTimeout + the default response timeout (5 s).
  const hold = 6500
  try {
    const key = prefix('orphan-sqllock') + 'k'
    await deadbolt.initialize(throughProxy(MYSQL_URL, proxy.port), { locking_ttl: 30_000, connectTimeout: 1000 })
    await warmUp(deadbolt, (face, k) => face.getLock(k))
    proxy.holdReplies(hold)
    const rejected = await rejectsLate(deadbolt.getLock(key))
    proxy.holdReplies(0)
    await freeBy(async () => (await direct.inspect(key)) === null, rejected + hold + 5000, key)
  } finally {
    await deadbolt.close()
    await proxy.close()
    await direct.close()
  }
})
