'use strict'
// A lock granted after a long wait is a whole lease: its clock starts when the request that
// granted it was sent, never when the wait began. Checked on every store and every face.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const deadbolt = require('..')
const { REDIS_URL, MYSQL_URL, PG_URL, needRedis, needMysql, needPg, prefix, sleep, closeRaw } = require('./helpers')

const { connect, createLock } = deadbolt

after(closeRaw)

const SQLITE_DIR = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-lease-clock-'))
after(() => fs.rmSync(SQLITE_DIR, { recursive: true, force: true }))

const STORES = [
  { name: 'memory', url: `memory://lease-clock-${process.pid}`, need: async () => true },
  { name: 'redis', url: REDIS_URL, need: needRedis },
  { name: 'mysql', url: MYSQL_URL, need: needMysql },
  { name: 'postgres', url: PG_URL, need: needPg },
  { name: 'sqlite', url: `sqlite://${path.join(SQLITE_DIR, 'locks.db')}`, need: async () => true },
]

// The holder keeps the key three times as long as the waiter's ttl. A lease of 700 ms, with
// its heartbeat every third of it, outlasts a reply or a stall of ~450 ms (a loaded machine).
const TTL = 700
const HOLD = 2100

for (const store of STORES) {
  test(`on ${store.name}, a lock granted after waiting longer than its ttl is held, and release frees it`, async (t) => {
    if (!(await store.need(t))) return
    const locks = await connect(store.url)
    try {
      const key = prefix('late') + store.name
      const holder = await locks.acquire(key, { ttl: 10_000 })
      setTimeout(() => holder.release(), HOLD)
      let lost = null
      const lock = await locks.acquire(key, { ttl: TTL, wait: 10_000, onLost: (e) => { lost = e } })
      assert.equal(lock.held, true)
      assert.equal(lock.signal.aborted, false)
      assert.equal(lost, null)
      const info = await locks.inspect(key)
      assert.equal(info.owner, lock.owner)
      assert.equal(await lock.release(), true)
      assert.equal(await locks.inspect(key), null, 'the store no longer holds it')
    } finally {
      await locks.close()
    }
  })

  test(`on ${store.name}, withLock after a long wait keeps its signal unaborted while the work runs`, async (t) => {
    if (!(await store.need(t))) return
    const locks = await connect(store.url)
    try {
      const key = prefix('late-with') + store.name
      const holder = await locks.acquire(key, { ttl: 10_000 })
      setTimeout(() => holder.release(), HOLD)
      const out = await locks.withLock(key, { ttl: TTL, wait: 10_000 }, async (lock) => {
        // Work for longer than the ttl: the heartbeat keeps the lease.
        await sleep(TTL * 2)
        assert.equal(lock.signal.aborted, false)
        assert.equal(lock.held, true)
        return 'done'
      })
      assert.equal(out, 'done')
    } finally {
      await locks.close()
    }
  })

  test(`on ${store.name}, an election won after a long wait is not revoked at once`, async (t) => {
    if (!(await store.need(t))) return
    const locks = await connect(store.url)
    try {
      const name = prefix('late-elect') + store.name
      const holder = await locks.acquire(name, { ttl: 10_000 })
      setTimeout(() => holder.release(), HOLD)
      let revoked = 0
      let elected
      const isElected = new Promise((resolve) => { elected = resolve })
      const election = locks.elect(name, { ttl: TTL, onElected: elected, onRevoked: () => { revoked++ } })
      await isElected
      await sleep(TTL * 2)
      assert.equal(election.isLeader, true)
      assert.equal(revoked, 0)
      await election.resign()
    } finally {
      await locks.close()
    }
  })
}

test('on the redislock face, a lock granted after a wait longer than its timeout releases cleanly', async (t) => {
  if (!(await needRedis(t))) return
  const key = prefix('late-rl') + 'k'
  const holder = createLock(REDIS_URL, { timeout: 10_000 })
  await holder.acquire(key)
  setTimeout(() => holder.release(), HOLD)
  const lock = createLock(REDIS_URL, { timeout: TTL, retries: -1, delay: 20 })
  await lock.acquire(key)
  assert.ok(deadbolt.getAcquiredLocks().includes(lock))
  await lock.release() // rejected "had expired" when the lease was counted from the wait
  const locks = await connect(REDIS_URL)
  assert.equal(await locks.inspect(key), null)
  await locks.close()
})

test('on the sql-lock face, a lock granted after a wait longer than its ttl is freed by its releaser', async (t) => {
  if (!(await needMysql(t))) return
  const sqlLock = require('..')
  await sqlLock.initialize(MYSQL_URL, { locking_ttl: 10_000 })
  const locks = await connect(MYSQL_URL)
  try {
    const key = prefix('late-sql') + 'k'
    const holder = await locks.acquire(key, { ttl: 10_000 })
    setTimeout(() => holder.release(), HOLD)
    const release = await sqlLock.getLock(key, TTL)
    const info = await locks.inspect(key)
    assert.ok(info, 'held once granted')
    await release()
    assert.equal(await locks.inspect(key), null, 'the releaser freed the row')
  } finally {
    await locks.close()
    await sqlLock.close()
  }
})

test('a grant this thread sees only after its lease ran out is given back, and acquire rejects with ERR_LOCK_ACQUISITION', async () => {
  const locks = await connect(`memory://lease-clock-stalled-${process.pid}`)
  try {
    const key = prefix('stalled') + 'k'
    const pending = locks.acquire(key, { ttl: 400, autoExtend: false })
    // Lets the request go out (it is sent from a promise reaction), then the event loop
    // stalls until the native side has granted the lock and then seen its
    // lease run out: the grant reaches this thread already lost. (Bounded, so a mistake
    // fails instead of hanging. The lease is long enough for this loop to see the grant
    // while it lasts, even on a loaded machine that deschedules it for a while.)
    for (let i = 0; i < 20; i++) await null
    const giveUp = Date.now() + 10_000
    let granted = false
    while (!(granted && locks.stats().held === 0) && Date.now() < giveUp) granted ||= locks.stats().held > 0
    assert.ok(granted, 'the native side granted it while the event loop stalled')
    await assert.rejects(pending, { code: 'ERR_LOCK_ACQUISITION' })
    assert.equal(locks.stats().held, 0)
  } finally {
    await locks.close()
  }
})

test('permits this thread sees only after their lease ran out are given back, and the semaphore rejects with ERR_LOCK_ACQUISITION', async () => {
  const locks = await connect(`memory://lease-clock-stalled-permits-${process.pid}`)
  try {
    const sem = locks.semaphore(prefix('stalled-permits') + 'sem', { limit: 2 })
    const pending = sem.acquire({ ttl: 400, autoExtend: false })
    // As for a lock above: the event loop stalls until the native side has granted the
    // permit and seen its lease run out, so the grant reaches this thread already lost.
    for (let i = 0; i < 20; i++) await null
    const giveUp = Date.now() + 10_000
    let granted = false
    while (!(granted && locks.stats().held === 0) && Date.now() < giveUp) granted ||= locks.stats().held > 0
    assert.ok(granted, 'the native side granted the permit while the event loop stalled')
    await assert.rejects(pending, { code: 'ERR_LOCK_ACQUISITION' })
    assert.equal(locks.stats().held, 0)
  } finally {
    await locks.close()
  }
})
