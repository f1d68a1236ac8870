'use strict'
// The Web Locks API, adoption and stopExtending, on every backend: called by apiSuite inside
// its describe, with its client, key maker and server check (see primitives.shared.js).

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const path = require('node:path')
const { eventually } = require('./helpers')
const { scenarios, deferred, until } = require('./weblocks.scenarios')
const { connect, LockLostError, Lock, Permit, RwHold } = require('..')

/** Starts __test__/fixtures/weblocks-child.js: `said(re)` resolves with the first match. */
function child(args) {
  const proc = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'weblocks-child.js'), ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  proc.stdout.setEncoding('utf8')
  proc.stdout.on('data', (d) => { out += d })
  return {
    said: (re) => eventually(() => re.exec(out) ?? (proc.exitCode !== null && proc.exitCode !== 0 && Promise.reject(new Error(`child exited with ${proc.exitCode}`))), 20000, `the child to print ${re}`),
    exited: () => eventually(() => proc.exitCode !== null, 20000, 'the child to exit').then(() => proc.exitCode),
    kill: () => { if (proc.exitCode === null) proc.kill('SIGKILL') },
  }
}

/** A second client with an engine of its own (other options), as another process would have. */
function otherClient(url) {
  return connect(url, { responseTimeout: 4321 })
}

function webLocksTests(c) {
  const { b, key, skipUnlessReady } = c

  for (const [title, run] of scenarios) {
    test(`web locks: ${title}`, async (t) => {
      if (await skipUnlessReady(t)) return
      await run(c.locks(), key('web'))
    })
  }

  test('web locks: the callback\'s lock has a fencing token that grows from grant to grant, whatever the mode', async (t) => {
    if (await skipUnlessReady(t)) return
    const locks = c.locks()
    const name = key('web')
    const first = await locks.request(name, (lock) => lock.fencingToken)
    const second = await locks.request(name, { mode: 'shared' }, (lock) => lock.fencingToken)
    assert.equal(typeof first, 'bigint')
    assert.ok(second > first)
  })

  test('web locks: a stolen holder\'s signal aborts with a LockLostError and its request\'s AbortError has it as cause', async (t) => {
    if (await skipUnlessReady(t)) return
    const locks = c.locks()
    const name = key('web')
    let signal = null
    const holding = locks.request(name, (lock) => { signal = lock.signal; return new Promise(() => {}) })
    const outcome = holding.catch((e) => e)
    await until(locks, name)
    await locks.request(name, { steal: true }, () => {})
    const err = await outcome
    assert.equal(err.name, 'AbortError')
    assert.ok(err.cause instanceof LockLostError)
    assert.equal(signal.aborted, true)
    assert.equal(signal.reason, err.cause)
  })

  test('web locks: a steal also takes the lock from a waiter of another client that the store served first', async (t) => {
    if (await skipUnlessReady(t)) return
    const other = await otherClient(b.url)
    try {
      const name = key('web')
      const outcomes = []
      const settle = (who, p) => p.then(() => outcomes.push(`${who} resolved`), (e) => outcomes.push(`${who} ${e.name}`))
      settle('holder', other.request(name, () => new Promise(() => {})))
      await until(c.locks(), name)
      let waiterGranted = false
      settle('waiter', other.request(name, () => { waiterGranted = true; return new Promise(() => {}) }))
      await until(c.locks(), name, 'pending')
      const token = await c.locks().request(name, { steal: true }, (lock) => lock.fencingToken)
      assert.equal(typeof token, 'bigint')
      await eventually(() => outcomes.length === 2, 20000, 'the holder and the waiter to hear of the steal')
      assert.deepEqual(outcomes.sort(), ['holder AbortError', 'waiter AbortError'])
      assert.equal(waiterGranted, true, 'the waiter was granted before the stealer, then stolen from')
    } finally {
      await other.close()
    }
  })

  test('web locks: query shows the lock held by another client with that client\'s id', async (t) => {
    if (await skipUnlessReady(t)) return
    const other = await otherClient(b.url)
    try {
      const name = key('web')
      const release = deferred()
      const holding = other.request(name, () => release.promise)
      await until(c.locks(), name)
      const held = (await c.locks().query()).held.filter((l) => l.name === name)
      assert.deepEqual(held, [{ name, mode: 'exclusive', clientId: other.clientId }])
      // What query found it by: a marker lock whose payload is the name.
      const markers = await c.locks().list('__deadbolt.weblocks/')
      assert.ok(markers.some((m) => m.data === name && m.owner.startsWith(`${other.clientId}.`)))
      assert.notEqual(other.clientId, c.locks().clientId)
      release.resolve()
      await holding
      assert.deepEqual((await c.locks().query()).held.filter((l) => l.name === name), [])
    } finally {
      await other.close()
    }
  })

  test('adopt takes over a lock another client holds, keeps its fencing token, then extends and releases it', async (t) => {
    if (await skipUnlessReady(t)) return
    const other = await otherClient(b.url)
    try {
      const k = key('adopt')
      const original = await other.acquire(k, { ttl: 2000, autoExtend: true, data: 'payload' })
      assert.equal(original.stopExtending(), true)
      const adopted = await c.locks().adopt(k, { owner: original.owner, ttl: 2000, autoExtend: true })
      assert.ok(adopted instanceof Lock)
      assert.equal(adopted.owner, original.owner)
      assert.equal(adopted.fencingToken, original.fencingToken)
      // Past the original lease: the adopter's heartbeat keeps it.
      const originalEnd = original.validUntil
      await eventually(() => Date.now() > originalEnd + 100, 10000, 'the original lease to end')
      assert.equal(adopted.held, true)
      assert.equal((await c.locks().inspect(k)).owner, original.owner)
      assert.equal((await c.locks().inspect(k)).data, 'payload')
      assert.equal(await adopted.release(), true)
      assert.equal(await c.locks().inspect(k), null)
    } finally {
      await other.close()
    }
  })

  test('adopt resolves null when the owner no longer holds the lock', async (t) => {
    if (await skipUnlessReady(t)) return
    const k = key('adopt')
    const lock = await c.locks().acquire(k)
    const owner = lock.owner
    await lock.release()
    assert.equal(await c.locks().adopt(k, { owner }), null)
    const next = await c.locks().acquire(k)
    assert.equal(await c.locks().adopt(k, { owner }), null, 'another owner holds it now')
    await next.release()
  })

  test('adopt takes over a semaphore\'s permits and a read-write hold with their token, count and mode', async (t) => {
    if (await skipUnlessReady(t)) return
    const other = await otherClient(b.url)
    try {
      const semName = key('sem')
      const permit = await other.semaphore(semName, { limit: 3 }).acquire({ permits: 2, ttl: 2000 })
      permit.stopExtending()
      const took = await c.locks().semaphore(semName, { limit: 3 }).adopt({ owner: permit.owner, autoExtend: true })
      assert.ok(took instanceof Permit)
      assert.equal(took.permits, 2)
      assert.equal(took.fencingToken, permit.fencingToken)
      const rwName = key('rw')
      const write = await other.readWriteLock(rwName).write({ ttl: 2000 })
      write.stopExtending()
      const hold = await c.locks().readWriteLock(rwName).adopt({ owner: write.owner })
      assert.ok(hold instanceof RwHold)
      assert.equal(hold.mode, 'write')
      assert.equal(hold.fencingToken, write.fencingToken)
      assert.equal(await c.locks().readWriteLock(rwName).adopt({ owner: 'nobody' }), null)
      assert.equal(await took.release(), true)
      assert.equal(await hold.release(), true)
      assert.equal(await c.locks().semaphore(semName, { limit: 3 }).permits(), 0)
    } finally {
      await other.close()
    }
  })

  test('stopExtending lets a lock lapse at the end of its lease: held turns false and signal aborts as expired', async (t) => {
    if (await skipUnlessReady(t)) return
    const k = key('stop')
    let heard = null
    // maxHold no longer applies once stopped: the loss is the lease's end, not max-hold.
    const lock = await c.locks().acquire(k, { ttl: 1000, autoExtend: true, maxHold: 600, onLost: (err) => { heard = err } })
    const before = lock.validUntil
    assert.equal(lock.stopExtending(), true)
    assert.ok(lock.validUntil > before, 'valid until the lease ends, no longer until maxHold')
    // Polled: a loss never holds the event loop open by itself.
    await eventually(() => lock.signal.aborted, 10000, 'the lease to lapse')
    const reason = lock.signal.reason
    assert.ok(reason instanceof LockLostError)
    assert.equal(reason.reason, 'expired')
    assert.equal(heard, reason, 'onLost hears it too')
    assert.equal(lock.held, false)
    assert.equal(lock.stopExtending(), false)
    const next = await eventually(() => c.locks().tryAcquire(k), 10000, 'the lease to end in the store')
    assert.ok(next.fencingToken > lock.fencingToken)
    await next.release()
  })

  test('closing a client leaves a lock it stopped extending to whoever adopted it', async (t) => {
    if (await skipUnlessReady(t)) return
    const other = await otherClient(b.url)
    const k = key('stop')
    const original = await other.acquire(k, { ttl: 2000, autoExtend: true })
    original.stopExtending()
    const adopted = await c.locks().adopt(k, { owner: original.owner, autoExtend: true, ttl: 2000 })
    await other.close()
    assert.equal((await c.locks().inspect(k))?.owner, original.owner)
    assert.equal(await adopted.release(), true)
  })

  if (b.crossProcess) {
    test('web locks: query shows a lock another process holds, with that process\'s client id', async (t) => {
      if (await skipUnlessReady(t)) return
      const name = key('web')
      const p = child(['hold', c.target, name, 'shared'])
      try {
        const [, clientId] = await p.said(/held (\S+)\n/)
        const held = (await c.locks().query()).held.filter((l) => l.name === name)
        assert.deepEqual(held, [{ name, mode: 'shared', clientId }])
      } finally {
        p.kill()
      }
    })

    test('web locks: steal takes a lock another process holds, and that process\'s request rejects with AbortError', async (t) => {
      if (await skipUnlessReady(t)) return
      const name = key('web')
      const p = child(['hold', c.target, name, 'exclusive'])
      try {
        await p.said(/held /)
        const token = await c.locks().request(name, { steal: true }, async (lock) => {
          // The holder hears of it at its next heartbeat, while the stealer holds the lock.
          const [, errName, cause] = await p.said(/rejected (\S+) (\S+)\n/)
          assert.equal(errName, 'AbortError')
          assert.equal(cause, 'ERR_LOCK_LOST')
          return lock.fencingToken
        })
        assert.equal(typeof token, 'bigint')
        assert.equal(await p.exited(), 0)
      } finally {
        p.kill()
      }
    })

    test('a lock a process stopped extending and left is adopted by another process, keeps its token and outlives its lease', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key('adopt')
      const p = child(['leave', c.target, k])
      const [, owner, token, validUntil] = await p.said(/(\S+) (\d+) (\d+)\n/)
      assert.equal(await p.exited(), 0)
      const lock = await c.locks().adopt(k, { owner, ttl: 1500, autoExtend: true })
      assert.ok(lock, 'the lease was left to lapse, not released, by the closing process')
      assert.equal(lock.fencingToken, BigInt(token))
      await eventually(() => Date.now() > Number(validUntil) + 100, 10000, 'the original lease to end')
      assert.equal(lock.held, true)
      assert.equal((await c.locks().inspect(k)).owner, owner)
      assert.equal(await lock.release(), true)
    })

    test('a read hold another process left is adopted with its mode and token', async (t) => {
      if (await skipUnlessReady(t)) return
      const name = key('rw')
      const p = child(['leave-read', c.target, name])
      const [, owner, token] = await p.said(/(\S+) (\d+) (\d+)\n/)
      assert.equal(await p.exited(), 0)
      const hold = await c.locks().readWriteLock(name).adopt({ owner, autoExtend: true })
      assert.equal(hold.mode, 'read')
      assert.equal(hold.fencingToken, BigInt(token))
      assert.equal(await hold.release(), true)
    })
  }
}

module.exports = { webLocksTests }
