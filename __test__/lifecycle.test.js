'use strict'
// What happens around a lock's life: worker threads that die, clients that are closed,
// losses nobody handles well, servers that restart.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const fs = require('node:fs')
const os = require('node:os')
const { spawnSync } = require('node:child_process')
const { Worker } = require('node:worker_threads')
const deadbolt = require('..')
const { REDIS_URL, MYSQL_URL, PG_URL, needRedis, needMysql, needPg, prefix, eventually, redisRaw, closeRaw } = require('./helpers')
const { startRedis } = require('./fixtures/redis-server')

const { connect, createLock, getAcquiredLocks, LockReleaseError } = deadbolt
const ROOT = path.join(__dirname, '..')

after(closeRaw)
const SQLITE_DIR = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-life-'))
after(() => fs.rmSync(SQLITE_DIR, { recursive: true, force: true }))

const WORKER = `
const { workerData, parentPort } = require('node:worker_threads')
const { connect } = require(workerData.root)
;(async () => {
  const locks = await connect(workerData.url)
  await locks.acquire(workerData.held, { ttl: 1000, autoExtend: true, extendEvery: 200 })
  locks.acquire(workerData.wanted, { ttl: 60000, wait: Infinity }).then(() => parentPort.postMessage('took'), () => {})
  parentPort.postMessage('ready')
})()
`

for (const store of [
  { name: 'redis', url: REDIS_URL, need: needRedis },
  { name: 'mysql', url: MYSQL_URL, need: needMysql },
  { name: 'postgres', url: PG_URL, need: needPg },
  // No server: a file of its own in a temporary directory.
  { name: 'sqlite', url: `sqlite://${path.join(SQLITE_DIR, 'locks.db')}`, need: async () => true },
]) {
  test(`on ${store.name}, a terminated worker thread's locks are released and its queued acquisitions never take a lock`, async (t) => {
    if (!(await store.need(t))) return
    const locks = await connect(store.url)
    try {
      const p = prefix('worker')
      const held = `${p}held`
      const wanted = `${p}wanted`
      const blocker = await locks.acquire(wanted, { ttl: 60_000 })
      const worker = new Worker(WORKER, { eval: true, workerData: { root: ROOT, url: store.url, held, wanted } })
      let took = false
      worker.on('message', (m) => { if (m === 'took') took = true })
      await new Promise((resolve, reject) => { worker.once('message', resolve); worker.once('error', reject) })
      // The engine is shared by the process: the worker's waiter shows in this client's stats.
      await eventually(() => locks.stats().waiting === 1, 5000, 'the worker to queue')
      await worker.terminate()
      await eventually(async () => (await locks.inspect(held)) === null, 5000, 'the held lock to be released')
      // Left: only this client's own lock, watched for its expiry.
      await eventually(() => locks.stats().waiting === 0 && locks.stats().scheduled === 1, 5000, 'the waiter to leave')
      await blocker.release()
      assert.equal(await locks.inspect(wanted), null, 'nobody took the released lock')
      assert.equal(took, false)
    } finally {
      await locks.close()
    }
  })
}

/** Runs `code` in a child process that must exit 0 on its own within `timeout` ms; its stdout. */
function runChild(code, timeout = 120_000) {
  const r = spawnSync(process.execPath, ['--expose-gc', '-e', code], { cwd: ROOT, encoding: 'utf8', timeout })
  assert.equal(r.error, undefined, `the process did not exit on its own within ${timeout} ms`)
  assert.equal(r.status, 0, r.stderr)
  return r.stdout
}

test('closed clients are garbage-collected: 10 000 connect and close cycles leave the heap as it was', () => {
  const out = runChild(`
    const { connect } = require('.')
    const settle = async () => { for (let i = 0; i < 5; i++) { global.gc(); await new Promise((r) => setTimeout(r, 20)) } }
    ;(async () => {
      for (let i = 0; i < 1000; i++) await (await connect('memory://gc-test')).close()
      await settle()
      const before = process.memoryUsage().heapUsed
      for (let i = 0; i < 10000; i++) await (await connect('memory://gc-test')).close()
      await settle()
      console.log(process.memoryUsage().heapUsed - before)
    })()
  `)
  // Version 0.1 kept every closed client (about 1 KiB each: 10 MiB here).
  assert.ok(Number(out) < 2 * 2 ** 20, `the heap grew by ${(Number(out) / 2 ** 20).toFixed(2)} MiB`)
})

async function redisClients() {
  return (await redisRaw().client('LIST')).trim().split('\n').length
}

test('closing clients with distinct options closes their Redis connections', async (t) => {
  if (!(await needRedis(t))) return
  const before = await redisClients()
  const clients = []
  for (let i = 0; i < 10; i++) clients.push(await connect(REDIS_URL, { connectTimeout: 5000 + i }))
  assert.ok(await redisClients() >= before + 10)
  await Promise.all(clients.map((c) => c.close()))
  await eventually(async () => (await redisClients()) <= before, 5000, 'the connections to close')
})

test('closing clients with distinct options closes their MySQL connections', async (t) => {
  if (!(await needMysql(t))) return
  const mysql = require('mysql2/promise')
  const raw = await mysql.createConnection({ host: '127.0.0.1', user: 'root', database: 'test' })
  try {
    const count = async () => (await raw.query('SHOW PROCESSLIST'))[0].length
    const before = await count()
    const clients = []
    for (let i = 0; i < 5; i++) clients.push(await connect(MYSQL_URL, { connectTimeout: 5000 + i }))
    assert.ok(await count() >= before + 5)
    await Promise.all(clients.map((c) => c.close()))
    await eventually(async () => (await count()) <= before, 5000, 'the connections to close')
  } finally {
    await raw.end()
  }
})

test('an onLost that throws is rethrown as an uncaught exception, after the signal was aborted', () => {
  const out = runChild(`
    const { connect } = require('.')
    let lock
    process.on('uncaughtException', (err) => {
      console.log(JSON.stringify({ message: err.message, aborted: lock.signal.aborted, held: lock.held }))
      process.exit(0)
    })
    ;(async () => {
      const locks = await connect('memory://onlost-throws')
      lock = await locks.acquire('k', { ttl: 100, onLost: () => { throw new Error('boom') } })
      lock.signal
      setTimeout(() => {}, 5000)
    })()
  `)
  assert.deepEqual(JSON.parse(out), { message: 'boom', aborted: true, held: false })
})

// jsdom's setTimeout returns a number; a fake one (jest's) never fires on its own. Neither may
// break a drain or keep a process alive: the client leaves the globals alone.
for (const [what, fake] of [
  ['a browser\'s, returning a number', '() => 1'],
  ['a fake one that never fires', '() => ({ ref() { return this }, unref() { return this }, refresh() { return this }, hasRef: () => true })'],
]) {
  test(`a client settles its calls and lets the process exit where the global setTimeout is ${what}`, () => {
    const out = runChild(`
      globalThis.setTimeout = ${fake}
      globalThis.clearTimeout = () => {}
      const { connect } = require('.')
      ;(async () => {
        const locks = await connect('memory://global-timers')
        for (let i = 0; i < 3; i++) {
          const lock = await locks.acquire('k', { ttl: 5000 })
          if (!(await lock.release())) throw new Error('not released')
        }
        console.log('settled')
        // Left open: once idle it must not keep the process running.
      })()
    `, 30_000)
    assert.equal(out.trim(), 'settled')
  })
}

test('getAcquiredLocks forgets a redislock-face lock whose lease ran out unreleased', async (t) => {
  if (!(await needRedis(t))) return
  const lock = createLock(REDIS_URL, { timeout: 150 })
  await lock.acquire(prefix('forgotten') + 'k')
  assert.ok(getAcquiredLocks().includes(lock))
  await eventually(() => !getAcquiredLocks().includes(lock), 5000, 'the expired lock to be forgotten')
  await assert.rejects(lock.release(), LockReleaseError)
})

test('the first call after a Redis restart succeeds on a fresh connection', async (t) => {
  if (!(await needRedis(t))) return
  let server = await startRedis()
  const locks = await connect(server.url)
  try {
    const k = prefix('restart') + 'k'
    await (await locks.acquire(k)).release()
    await server.kill()
    server = await startRedis(server.port)
    const lock = await locks.acquire(k)
    assert.equal(await lock.release(), true)
  } finally {
    await locks.close()
    await server.kill()
  }
})

test('an acquisition aborted in the same tick it was made rejects at once and leaves no waiter', { timeout: 10_000 }, async () => {
  const locks = await connect('memory://abort-early')
  try {
    const k = prefix('abort-early') + 'k'
    const holder = await locks.acquire(k)
    const outcomes = await Promise.allSettled(Array.from({ length: 200 }, () => {
      const ac = new AbortController()
      const p = locks.acquire(k, { wait: Infinity, signal: ac.signal })
      ac.abort()
      return p
    }))
    assert.ok(outcomes.every((o) => o.status === 'rejected' && o.reason.name === 'AbortError'), 'every one rejected with the signal\'s reason')
    assert.equal(locks.stats().waiting, 0)
    await holder.release()
    assert.equal(await locks.inspect(k), null)
  } finally {
    await locks.close()
  }
})

test('an acquisition pending when close() is called rejects with LockClosedError, never resolves with a dead lock', async () => {
  const locks = await connect('memory://close-while-granting')
  const k = prefix('close-grant') + 'k'
  // Granted at once by the store, while close() runs in the same tick.
  const pending = Array.from({ length: 50 }, (_, i) => locks.acquire(`${k}${i}`))
  const closing = locks.close()
  const outcomes = await Promise.allSettled(pending)
  await closing
  for (const o of outcomes) {
    if (o.status === 'fulfilled') assert.fail('a lock was handed out by a closed client')
    assert.equal(o.reason.code, 'ERR_LOCK_CLOSED')
  }
})

test('close() settles every acquisition submitted in the same tick, however the runtime orders them', { timeout: 60_000 }, async () => {
  // The acquisitions and the close run as separate native tasks: when the close finished
  // first, the client let go of its wake-up function and the acquisitions never settled
  // (about 1 run in 25). Each round must settle all of them, as LockClosedError.
  for (let round = 0; round < 150; round++) {
    const locks = await connect('memory://close-race')
    const k = prefix('close-race') + 'k'
    const settled = Promise.allSettled(Array.from({ length: 20 }, (_, i) => locks.acquire(`${k}${i}`)))
    await locks.close()
    for (const o of await settled) {
      assert.equal(o.status, 'rejected', 'a lock was handed out by a closed client')
      assert.equal(o.reason.code, 'ERR_LOCK_CLOSED')
    }
  }
})

test('an acquisition of a free key aborted right after the call never resolves with a lock', { timeout: 20_000 }, async () => {
  const locks = await connect('memory://abort-free')
  try {
    const p = prefix('abort-free')
    const outcomes = await Promise.allSettled(Array.from({ length: 500 }, (_, i) => {
      const ac = new AbortController()
      const pending = locks.acquire(`${p}${i}`, { signal: ac.signal })
      // Aborted while the store may already be answering.
      queueMicrotask(() => ac.abort())
      return pending
    }))
    for (const o of outcomes) {
      if (o.status === 'fulfilled') assert.fail('an aborted acquisition resolved with a lock')
      assert.equal(o.reason.name, 'AbortError')
    }
    await eventually(() => locks.stats().held === 0, 5000, 'the raced grants to be given back')
    for (let i = 0; i < 500; i += 50) assert.equal(await locks.inspect(`${p}${i}`), null)
  } finally {
    await locks.close()
  }
})
