'use strict'
// Semaphores and read-write locks, on every backend: called by apiSuite inside its describe,
// with its client, key maker and server check.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { sleep, eventually } = require('./helpers')
const { connect, LockAcquisitionError, LockLostError, Permit, RwHold } = require('..')

/**
 * @param {object} c
 * @param {object} c.b   the backend description apiSuite got
 * @param {() => import('..').LockClient} c.locks  the suite's client
 * @param {(name?: string) => string} c.key  a fresh key
 * @param {(t) => Promise<boolean>} c.skipUnlessReady
 * @param {(args: string[]) => Promise<string>} c.runChild  runs __test__/fixtures/child.js
 * @param {string} c.target  the backend's URL as a child process takes it
 */
function primitiveTests(c) {
  const { b, key, skipUnlessReady } = c

  test('a semaphore grants permits up to its limit and refuses the next until one is released', async (t) => {
    if (await skipUnlessReady(t)) return
    const sem = c.locks().semaphore(key('sem'), { limit: 2 })
    const a = await sem.acquire()
    const p = await sem.acquire()
    assert.ok(a instanceof Permit)
    assert.equal(a.permits, 1)
    assert.equal(a.semaphore, sem.name)
    assert.equal(await sem.tryAcquire(), null)
    await assert.rejects(sem.acquire({ wait: 50 }), (err) => err instanceof LockAcquisitionError && err.code === 'ERR_LOCK_ACQUISITION')
    assert.equal(await sem.permits(), 2)
    assert.equal(await a.release(), true)
    const again = await sem.tryAcquire()
    assert.ok(again, 'a released permit is free again')
    await Promise.all([p.release(), again.release()])
    assert.equal(await sem.permits(), 0)
  })

  test('a waiter for a permit gets it as soon as a holder releases one', async (t) => {
    if (await skipUnlessReady(t)) return
    const sem = c.locks().semaphore(key('sem'), { limit: 1 })
    const a = await sem.acquire()
    const waiting = sem.acquire({ wait: 10000, retryDelay: 60000 })
    await sleep(20)
    await a.release()
    const got = await waiting
    assert.ok(got.fencingToken > a.fencingToken)
    await got.release()
  })

  if (b.fairAcrossProcesses) {
    test('a permit waiter is woken by a release announced from another client, not by a poll', async (t) => {
      if (await skipUnlessReady(t)) return
      const name = key('sem')
      // Other options: an engine of its own, so only the store's announcement can wake us.
      const other = await connect(c.b.url, { responseTimeout: 4321 })
      try {
        const held = await other.semaphore(name, { limit: 1 }).acquire()
        const waiting = c.locks().semaphore(name, { limit: 1 }).acquire({ wait: 10000, retryDelay: 2 ** 31 - 1 })
        await eventually(() => c.locks().stats().waiting > 0 && c.locks().stats().subscriptions > 0, 5000, 'the waiter to listen')
        await held.release()
        const got = await waiting
        assert.equal(got.held, true)
        await got.release()
      } finally {
        await other.close()
      }
    })
  }

  test('several permits are taken all at once or not at all', async (t) => {
    if (await skipUnlessReady(t)) return
    const sem = c.locks().semaphore(key('sem'), { limit: 3 })
    const two = await sem.acquire({ permits: 2 })
    assert.equal(two.permits, 2)
    assert.equal(await sem.tryAcquire({ permits: 2 }), null)
    assert.equal(await sem.permits(), 2, 'a refused request takes nothing')
    const one = await sem.tryAcquire()
    assert.ok(one)
    await two.release()
    const again = await sem.acquire({ permits: 2, wait: 1000 })
    assert.equal(await sem.permits(), 3)
    await Promise.all([one.release(), again.release()])
  })

  test('the holders of a semaphore are read from the store with their permits and tokens', async (t) => {
    if (await skipUnlessReady(t)) return
    const sem = c.locks().semaphore(key('sem'), { limit: 5 })
    const a = await sem.acquire({ permits: 3 })
    const d = await sem.acquire()
    const holders = (await sem.holders()).sort((x, y) => (x.fencingToken < y.fencingToken ? -1 : 1))
    assert.deepEqual(holders.map((h) => [h.owner, h.permits, h.fencingToken]), [[a.owner, 3, a.fencingToken], [d.owner, 1, d.fencingToken]])
    assert.ok(holders.every((h) => h.remainingMs > 0 && h.remainingMs <= 10000))
    await Promise.all([a.release(), d.release()])
    assert.deepEqual(await sem.holders(), [])
  })

  test('permits whose holder stopped extending them are reclaimed when their lease ends', async (t) => {
    if (await skipUnlessReady(t)) return
    const sem = c.locks().semaphore(key('sem'), { limit: 2 })
    let lost = null
    const stale = await sem.acquire({ permits: 2, ttl: 300, onLost: (e) => { lost = e } })
    const next = await sem.acquire({ permits: 2, wait: 5000, retryDelay: 20 })
    assert.ok(next.fencingToken > stale.fencingToken)
    assert.equal(stale.held, false)
    await eventually(() => lost !== null, 5000, 'the loss to be reported')
    assert.ok(lost instanceof LockLostError)
    assert.equal(await stale.release(), false)
    await next.release()
  })

  test('heartbeats keep permits held past their ttl', async (t) => {
    if (await skipUnlessReady(t)) return
    const sem = c.locks().semaphore(key('sem'), { limit: 1 })
    const p = await sem.acquire({ ttl: 300, autoExtend: true, extendEvery: 50 })
    await sleep(700)
    assert.equal(p.held, true)
    assert.equal(await sem.tryAcquire(), null)
    const [h] = await sem.holders()
    assert.equal(h.owner, p.owner)
    await p.release()
  })

  test('withPermit runs the routine under a permit, returns its result and releases', async (t) => {
    if (await skipUnlessReady(t)) return
    const sem = c.locks().semaphore(key('sem'), { limit: 2 })
    const out = await sem.withPermit({ permits: 2 }, async (p) => {
      assert.equal(p.held, true)
      assert.equal(await sem.permits(), 2)
      return 'done'
    })
    assert.equal(out, 'done')
    assert.equal(await sem.permits(), 0)
  })

  test('permit waiters in one process are served in the order they asked', async (t) => {
    if (await skipUnlessReady(t)) return
    const sem = c.locks().semaphore(key('sem'), { limit: 1 })
    const first = await sem.acquire()
    const order = []
    const waiters = [0, 1, 2, 3, 4].map(async (i) => {
      await sleep(i * 10)
      const p = await sem.acquire({ wait: 10000, retryDelay: 20 })
      order.push(i)
      await sleep(2)
      await p.release()
    })
    await sleep(80)
    await first.release()
    await Promise.all(waiters)
    assert.deepEqual(order, [0, 1, 2, 3, 4])
  })

  test('an aborted permit wait gives up its place and holds nobody back', async (t) => {
    if (await skipUnlessReady(t)) return
    const sem = c.locks().semaphore(key('sem'), { limit: 1 })
    const a = await sem.acquire()
    const ac = new AbortController()
    const waiting = sem.acquire({ signal: ac.signal, wait: 10000, retryDelay: 20 })
    await sleep(50)
    ac.abort()
    await assert.rejects(waiting, (err) => err.name === 'AbortError' || err.code === 'ERR_LOCK_ABORTED')
    await a.release()
    // Had the aborted waiter kept its place in the store's queue, a try would be refused.
    const got = await eventually(() => sem.tryAcquire(), 1000, 'the permit to be free for a try')
    await got.release()
  })

  test('permit fencing tokens strictly increase', async (t) => {
    if (await skipUnlessReady(t)) return
    const sem = c.locks().semaphore(key('sem'), { limit: 3 })
    let last = 0n
    for (let i = 0; i < 10; i++) {
      const p = await sem.acquire({ permits: 1 + (i % 3) })
      assert.ok(p.fencingToken > last)
      last = p.fencingToken
      await p.release()
    }
  })

  test('a semaphore and a lock with the same name are independent', async (t) => {
    if (await skipUnlessReady(t)) return
    const k = key('both')
    const lock = await c.locks().acquire(k)
    const p = await c.locks().semaphore(k, { limit: 1 }).tryAcquire()
    assert.ok(p, 'the lock does not take the permit')
    assert.equal((await c.locks().inspect(k)).owner, lock.owner)
    await Promise.all([lock.release(), p.release()])
  })

  test('readers share a read-write lock and a writer excludes them', async (t) => {
    if (await skipUnlessReady(t)) return
    const rw = c.locks().readWriteLock(key('rw'))
    const r1 = await rw.read()
    const r2 = await rw.tryRead()
    assert.ok(r2, 'a second reader shares it')
    assert.ok(r1 instanceof RwHold)
    assert.equal(r1.mode, 'read')
    assert.equal(await rw.tryWrite(), null)
    await Promise.all([r1.release(), r2.release()])
    const w = await rw.tryWrite()
    assert.equal(w.mode, 'write')
    assert.equal(await rw.tryRead(), null)
    assert.equal(await rw.tryWrite(), null)
    assert.deepEqual((await rw.holders()).map((h) => h.mode), ['write'])
    await w.release()
  })

  test('a waiting writer is not starved by readers that keep coming', async (t) => {
    if (await skipUnlessReady(t)) return
    const name = key('rw')
    const rw = c.locks().readWriteLock(name)
    // The readers use a client with an engine of its own (other options), as another process
    // would: only the store's queue, not a local one, can hold them back for the writer.
    const other = await connect(c.b.url, { responseTimeout: 4321 })
    const otherRw = other.readWriteLock(name)
    // Readers overlap without a gap: without fairness the writer would never find it free.
    let stop = false
    // Five readers holding 100 ms each, staggered by 20 ms, leave no gap for seconds.
    const readers = [0, 1, 2, 3, 4].map(async (i) => {
      await sleep(i * 20)
      while (!stop) {
        const r = await otherRw.read({ wait: 20000, retryDelay: 10 })
        await sleep(100)
        await r.release()
      }
    })
    try {
      await sleep(150)
      const w = await rw.write({ wait: 5000, retryDelay: 10 })
      stop = true
      assert.equal(w.held, true)
      await w.release()
      await Promise.all(readers)
    } finally {
      stop = true
      await Promise.all(readers).catch(() => {})
      await other.close()
    }
  })

  test('read and write holds draw fencing tokens from one sequence', async (t) => {
    if (await skipUnlessReady(t)) return
    const rw = c.locks().readWriteLock(key('rw'))
    const r = await rw.read()
    await r.release()
    const w = await rw.write()
    await w.release()
    const r2 = await rw.read()
    await r2.release()
    assert.ok(r.fencingToken < w.fencingToken && w.fencingToken < r2.fencingToken)
  })

  test('withRead and withWrite run the routine under the hold and release it', async (t) => {
    if (await skipUnlessReady(t)) return
    const rw = c.locks().readWriteLock(key('rw'))
    assert.equal(await rw.withWrite(async (h) => h.mode), 'write')
    assert.equal(await rw.withRead({ ttl: 1000 }, async (h) => h.mode), 'read')
    assert.deepEqual(await rw.holders(), [])
  })

  if (b.crossProcess) {
    test('a semaphore limit of 3 is never exceeded by 3 processes taking 1 or 2 permits', async (t) => {
      if (await skipUnlessReady(t)) return
      const name = key('sem-x')
      const outs = await Promise.all([0, 1, 2].map(() => c.runChild(['permits', c.target, name, '30'])))
      const holds = outs.join('').trim().split('\n').map((line) => {
        const [permits, token, start, end, asked, released] = line.split(' ')
        return { permits: Number(permits), token: BigInt(token), start: BigInt(start), end: BigInt(end), asked: BigInt(asked), released: BigInt(released) }
      })
      assert.equal(holds.length, 90)
      // Redlock draws a grant's token as the largest of its servers': holders at the same time
      // may share one. Everywhere, a hold asked for after another was released has a larger one.
      if (!b.sharedPermitTokens) assert.equal(new Set(holds.map((h) => String(h.token))).size, 90, 'every token is unique')
      for (const x of holds) {
        for (const y of holds) {
          if (x.released < y.asked) assert.ok(x.token < y.token, `token ${y.token} came after ${x.token}`)
        }
      }
      // Sweep the hold intervals: the permits held at any moment never pass the limit.
      const events = holds.flatMap((h) => [[h.start, h.permits], [h.end, -h.permits]])
      events.sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : x[1] - y[1]))
      let taken = 0
      for (const [, d] of events) {
        taken += d
        assert.ok(taken <= 3, `${taken} permits of 3 held at once`)
      }
      // Every process released what it held: nothing is left held by nobody.
      assert.deepEqual(await c.locks().semaphore(name, { limit: 3 }).holders(), [])
    })

    test('a write hold never overlaps another hold across 3 processes', async (t) => {
      if (await skipUnlessReady(t)) return
      const name = key('rw-x')
      const outs = await Promise.all([0, 1, 2].map(() => c.runChild(['rw', c.target, name, '30'])))
      const holds = outs.join('').trim().split('\n').map((line) => {
        const [mode, token, start, end] = line.split(' ')
        return { mode, token: BigInt(token), start: BigInt(start), end: BigInt(end) }
      })
      assert.equal(holds.length, 90)
      for (const w of holds.filter((h) => h.mode === 'write')) {
        for (const o of holds) {
          if (o === w) continue
          assert.ok(o.end <= w.start || o.start >= w.end, `a ${o.mode} hold overlapped a write hold`)
        }
      }
      assert.deepEqual(await c.locks().readWriteLock(name).holders(), [])
    })

    test('the permits of a killed process are taken over once their lease ends', async (t) => {
      if (await skipUnlessReady(t)) return
      const name = key('sem-dead')
      const child = c.spawnChild(['hold-permits', c.target, name])
      try {
        await child.said('acquired')
        const sem = c.locks().semaphore(name, { limit: 3 })
        assert.equal(await sem.tryAcquire(), null)
        child.kill()
        const p = await sem.acquire({ wait: 10000, retryDelay: 50 })
        assert.equal(p.held, true)
        await p.release()
      } finally {
        child.kill()
      }
    })
  }

  test('bad semaphore and read-write lock arguments are refused with a coded error naming them', async (t) => {
    if (await skipUnlessReady(t)) return
    const locks = c.locks()
    assert.throws(() => locks.semaphore('s'), (e) => e instanceof TypeError && e.code === 'ERR_INVALID_ARG_TYPE' && /options/.test(e.message))
    assert.throws(() => locks.semaphore('s', { limit: 0 }), (e) => e instanceof RangeError && e.code === 'ERR_OUT_OF_RANGE' && /options\.limit/.test(e.message))
    assert.throws(() => locks.semaphore('s', { limit: 2 ** 40 }), (e) => e instanceof RangeError && /options\.limit/.test(e.message))
    assert.throws(() => locks.semaphore('', { limit: 1 }), (e) => e.code === 'ERR_INVALID_ARG_VALUE' && /name/.test(e.message))
    assert.throws(() => locks.semaphore('s', { limt: 1 }), (e) => e instanceof TypeError && /limt/.test(e.message))
    assert.throws(() => locks.readWriteLock(42), (e) => e instanceof TypeError && /name/.test(e.message))
    const sem = locks.semaphore(key('sem'), { limit: 2 })
    await assert.rejects(sem.acquire({ permits: 3 }), (e) => e instanceof RangeError && /options\.permits/.test(e.message))
    await assert.rejects(sem.acquire({ permits: 1.5 }), (e) => e instanceof RangeError && /options\.permits/.test(e.message))
    await assert.rejects(sem.acquire({ data: 'x' }), (e) => e.code === 'ERR_INVALID_ARG_VALUE' && /options\.data/.test(e.message))
    await assert.rejects(sem.acquire({ reentrant: true }), (e) => e.code === 'ERR_INVALID_ARG_VALUE' && /options\.reentrant/.test(e.message))
    await assert.rejects(locks.readWriteLock(key('rw')).read({ permits: 2 }), (e) => e.code === 'ERR_INVALID_ARG_VALUE' && /options\.permits/.test(e.message))
    assert.equal(await sem.permits(), 0, 'nothing was taken')
  })
}

module.exports = { primitiveTests }
