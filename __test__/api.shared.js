'use strict'
// The modern API's behaviour, one suite for every backend. Each backend's spec file calls
// `apiSuite` with its URL, a server check, and a way to break a lock from outside.

const { describe, test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const path = require('node:path')
const deadbolt = require('..')
const { prefix, sleep, eventually } = require('./helpers')
const { primitiveTests } = require('./primitives.shared')
const { identityTests } = require('./identity.shared')
const { webLocksTests } = require('./weblocks.shared')

const { connect, LockAcquisitionError, LockExtendError, LockLostError } = deadbolt

/**
 * @param {object} b
 * @param {string} b.name       backend name for the test titles
 * @param {string|string[]} b.url  connection URL (or what else connect() takes: an array of
 *   Redlock servers); read when the suite starts, so it may be a getter
 * @param {(t) => Promise<boolean>} b.need   server check (fails under CI when down)
 * @param {(key: string) => Promise<void>} [b.breakLock]  deletes the lock behind deadbolt's back
 * @param {boolean} [b.crossProcess]  whether separate processes share the store
 * @param {boolean} [b.fairAcrossProcesses]  whether the store tells a releaser that other
 *   processes wait (Redis: pub/sub), so a busy process lets them have the key
 * @param {boolean} [b.sharedPermitTokens]  whether permits held at the same time may share a
 *   fencing token (Redlock: a grant's token is the largest of its servers')
 * @param {(runPrefix: string) => Promise<void>} [b.cleanup]  deletes what the suite left in
 *   the store under `runPrefix`, the prefix of every key the suite used
 */
function apiSuite(b) {
  describe(`modern API on ${b.name}`, () => {
    let locks
    let ready = false
    before(async () => {
      ready = await b.need({ skip() {} })
      if (ready) locks = await connect(b.url)
    })
    // One random prefix per run (so `cleanup` can find every key) and a counter per key.
    const run = prefix(b.name)
    let n = 0
    after(async () => {
      if (locks) await locks.close()
      if (ready && b.cleanup) await b.cleanup(run)
    })
    const key = (name = 'k') => `${run}${++n}:${name}`
    const skipUnlessReady = async (t) => {
      if (!ready) return !(await b.need(t))
      return false
    }

    test('acquire returns a held lock with its key, owner and a bigint fencing token', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      const lock = await locks.acquire(k)
      assert.equal(lock.key, k)
      assert.equal(typeof lock.owner, 'string')
      assert.equal(typeof lock.fencingToken, 'bigint')
      assert.equal(lock.held, true)
      assert.equal(lock.signal.aborted, false)
      assert.equal(await lock.release(), true)
      assert.equal(lock.held, false)
    })

    test('forceRelease frees a lock whoever holds it, and its holder hears it lost at its next extension', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      let lost = null
      const lock = await locks.acquire(k, { ttl: 5000, autoExtend: true, extendEvery: 100, onLost: (e) => { lost = e } })
      assert.equal(await locks.forceRelease(k), true)
      assert.equal(await locks.forceRelease(k), false, 'nothing left to free')
      const other = await locks.tryAcquire(k)
      assert.ok(other, 'free for others at once')
      await eventually(() => lost !== null, 5000, 'the holder to hear of it')
      assert.equal(lost.reason, 'not-owned')
      assert.equal(lock.held, false)
      await other.release()
    })

    test('list shows the held locks under a prefix with their holders, and not the released ones', async (t) => {
      if (await skipUnlessReady(t)) return
      const p = key('list') + ':'
      const a = await locks.acquire(`${p}a`, { data: 'payload' })
      const b = await locks.acquire(`${p}b`)
      await (await locks.acquire(`${p}c`)).release()
      const listed = (await locks.list(p)).sort((x, y) => x.key.localeCompare(y.key))
      assert.deepEqual(listed.map((l) => [l.key, l.owner, l.fencingToken]), [[a.key, a.owner, a.fencingToken], [b.key, b.owner, b.fencingToken]])
      assert.equal(listed[0].data, 'payload')
      assert.equal((await locks.list(p, { limit: 1 })).length, 1)
      await assert.rejects(locks.list(p, { limt: 1 }), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE' })
      await a.release()
      await b.release()
    })

    test('tryAcquire resolves null while someone else holds the key', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      const lock = await locks.acquire(k)
      assert.equal(await locks.tryAcquire(k), null)
      await lock.release()
      const again = await locks.tryAcquire(k)
      assert.ok(again)
      await again.release()
    })

    test('acquire rejects with LockAcquisitionError when the wait runs out', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      const lock = await locks.acquire(k)
      await assert.rejects(locks.acquire(k, { wait: 100 }), (err) => err instanceof LockAcquisitionError && err.code === 'ERR_LOCK_ACQUISITION')
      await lock.release()
    })

    test('a waiter gets the lock as soon as the holder releases it', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      const first = await locks.acquire(k)
      // A long poll delay: only the release's wake-up can hand the lock over quickly.
      const waiting = locks.acquire(k, { wait: 10000, retryDelay: 5000, jitter: 0 })
      await sleep(50)
      const releasedAt = Date.now()
      await first.release()
      const second = await waiting
      assert.ok(Date.now() - releasedAt < 2500, 'woken by the release, not by the 5 s poll')
      assert.ok(second.fencingToken > first.fencingToken)
      await second.release()
    })

    test('a lock taken with fencing: false has a null token and excludes every other acquisition', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key('bare')
      const first = await locks.acquire(k)
      await first.release()
      const bare = await locks.acquire(k, { fencing: false })
      assert.equal(bare.fencingToken, null)
      assert.equal(bare.held, true)
      assert.equal(JSON.parse(JSON.stringify(bare)).fencingToken, null)
      assert.equal(await locks.tryAcquire(k), null)
      assert.equal(await locks.tryAcquire(k, { fencing: false }), null)
      const info = await locks.inspect(k)
      assert.equal(info.owner, bare.owner)
      await bare.extend(20_000)
      assert.equal(await bare.release(), true)
      // Tokens of fenced grants keep increasing around it.
      const next = await locks.acquire(k)
      assert.ok(next.fencingToken > first.fencingToken)
      await next.release()
    })

    test('a waiter gets a lock taken with fencing: false as soon as its holder releases it', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key('bare-wait')
      const first = await locks.acquire(k, { fencing: false, data: 'a' })
      // Only the release's wake-up or handoff can give it the lock before the 60 s poll.
      const waiting = locks.acquire(k, { fencing: false, wait: 30_000, retryDelay: 60_000, jitter: 0 })
      await sleep(50)
      await first.release()
      const second = await waiting
      assert.equal(second.fencingToken, null)
      assert.equal((await locks.inspect(k)).data, null, "the first holder's payload went with it")
      await second.release()
    })

    test('validUntil is the local deadline: within the ttl of the request, later after an extension, null once released', async (t) => {
      if (await skipUnlessReady(t)) return
      const before = Date.now()
      const lock = await locks.acquire(key(), { ttl: 5000 })
      const until = lock.validUntil
      assert.ok(until > Date.now(), 'valid now')
      // Reckoned from when the granting request was sent, less a margin: never past ttl
      // after the call started.
      assert.ok(until <= before + 5000, `${until - before} ms after the call started`)
      const extending = Date.now()
      await lock.extend(60_000)
      assert.ok(lock.validUntil > until && lock.validUntil <= Date.now() + 60_000 && lock.validUntil > extending + 5000)
      await lock.release()
      assert.equal(lock.validUntil, null)
    })

    test('release is idempotent: true the first time, false afterwards', async (t) => {
      if (await skipUnlessReady(t)) return
      const lock = await locks.acquire(key())
      assert.equal(await lock.release(), true)
      assert.equal(await lock.release(), false)
    })

    test('release of a lock whose lease expired resolves false', async (t) => {
      if (await skipUnlessReady(t)) return
      const lock = await locks.acquire(key(), { ttl: 50, onLost() {} })
      await sleep(150)
      assert.equal(await lock.release(), false)
    })

    if (b.breakLock) test('extend sets a new lease and rejects with LockExtendError once the lock is gone', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      const lock = await locks.acquire(k, { ttl: 1000, onLost() {} })
      await lock.extend(5000)
      const info = await locks.inspect(k)
      assert.ok(info.remainingMs > 4000, `remaining ${info.remainingMs}`)
      await b.breakLock(k)
      await assert.rejects(lock.extend(5000), (err) => err instanceof LockExtendError && err.code === 'ERR_LOCK_EXTEND')
      assert.equal(lock.held, false)
    })

    test('Symbol.asyncDispose releases the lock (await using)', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      {
        const lock = await locks.acquire(k)
        await lock[Symbol.asyncDispose]()
      }
      assert.equal(await locks.inspect(k), null)
    })

    test('inspect reports owner, fencing token, remaining lease and string data', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      const lock = await locks.acquire(k, { ttl: 3000, data: 'host-a' })
      const info = await locks.inspect(k)
      assert.equal(info.key, k)
      assert.equal(info.owner, lock.owner)
      assert.equal(info.fencingToken, lock.fencingToken)
      assert.ok(info.remainingMs > 2000 && info.remainingMs <= 3000, `remaining ${info.remainingMs}`)
      assert.equal(info.data, 'host-a')
      await lock.release()
      assert.equal(await locks.inspect(k), null)
    })

    test('binary data comes back from inspect as the same bytes', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      const bytes = Buffer.from([0, 1, 2, 255, 0x73, 0])
      const lock = await locks.acquire(k, { data: bytes })
      const info = await locks.inspect(k)
      assert.ok(Buffer.isBuffer(info.data))
      assert.deepEqual(info.data, bytes)
      await lock.release()
    })

    test('the data of an auto-extended lock lives as long as the lock', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      const asked = Date.now()
      const lock = await locks.acquire(k, { ttl: 500, autoExtend: true, data: 'payload' })
      // Extended until its lease reaches past twice the first one's end.
      await eventually(() => !lock.held || lock.validUntil > asked + 1000, 5000, 'the lease to be extended twice')
      assert.equal(lock.held, true, 'the lock was lost')
      assert.equal((await locks.inspect(k)).data, 'payload')
      await lock.release()
    })

    test('a lease with autoExtend outlives three times its ttl', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      const lock = await locks.acquire(k, { ttl: 500, autoExtend: true })
      await sleep(1600)
      assert.equal(lock.held, true)
      const info = await locks.inspect(k)
      assert.equal(info?.owner, lock.owner)
      assert.equal(await locks.tryAcquire(k), null)
      assert.equal(await lock.release(), true)
    })

    if (b.breakLock) test('a lock deleted from outside aborts its signal and calls onLost', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      let lostErr = null
      const lock = await locks.acquire(k, { ttl: 3000, autoExtend: true, extendEvery: 100, onLost: (e) => { lostErr = e } })
      const signal = lock.signal
      await b.breakLock(k)
      await eventually(() => signal.aborted, 2000, 'the signal to abort')
      assert.ok(signal.reason instanceof LockLostError)
      assert.equal(signal.reason.code, 'ERR_LOCK_LOST')
      assert.equal(signal.reason.reason, 'not-owned')
      assert.equal(lostErr, signal.reason)
      assert.equal(lock.held, false)
      assert.equal(await lock.release(), false)
    })

    test('a lease that nobody extends is reported lost when it expires', async (t) => {
      if (await skipUnlessReady(t)) return
      const lock = await locks.acquire(key(), { ttl: 100 })
      const reason = await abortReasonOf(lock.signal)
      assert.equal(reason.reason, 'expired')
      assert.equal(lock.held, false)
    })

    test('maxHold stops the heartbeat, gives the lock up and frees the key', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      const lock = await locks.acquire(k, { ttl: 2000, autoExtend: true, extendEvery: 50, maxHold: 200 })
      const reason = await abortReasonOf(lock.signal)
      assert.equal(reason.reason, 'max-hold')
      await eventually(async () => (await locks.inspect(k)) === null, 2000, 'the key to be freed')
    })

    test('an aborted acquire rejects with the signal reason and leaves no lock behind', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      const holder = await locks.acquire(k)
      const ac = new AbortController()
      const waiting = locks.acquire(k, { wait: Infinity, signal: ac.signal })
      await sleep(50)
      const reason = new Error('stop waiting')
      ac.abort(reason)
      await assert.rejects(waiting, (err) => err === reason)
      await holder.release()
      await sleep(100)
      assert.equal(await locks.inspect(k), null)
    })

    test('an acquire aborted while its grant is on its way rejects only once the lock is given back', async (t) => {
      if (await skipUnlessReady(t)) return
      // The abort follows the request at once: the grant may reach this thread after it
      // (a fast store), or the cancellation reach the store's answer first (a slow one).
      // Either way nothing is held once the rejection is seen, not even for a moment.
      for (let i = 0; i < 5; i++) {
        const k = key()
        const held = locks.stats().held
        const ac = new AbortController()
        const acquiring = locks.acquire(k, { signal: ac.signal })
        ac.abort()
        assert.equal(await acquiring.then(() => 'granted', (e) => e.name), 'AbortError')
        assert.equal(locks.stats().held, held, `round ${i}: the grant is still held`)
        assert.equal(await locks.inspect(k), null)
      }
    })

    test('an already aborted signal rejects at once without touching the store', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      await assert.rejects(locks.acquire(k, { signal: AbortSignal.abort() }), { name: 'AbortError' })
      assert.equal(await locks.inspect(k), null)
    })

    test('withLock runs the routine under the lock, returns its result and releases', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      const result = await locks.withLock(k, async (lock) => {
        assert.equal(lock.held, true)
        assert.equal((await locks.inspect(k)).owner, lock.owner)
        return 42
      })
      assert.equal(result, 42)
      assert.equal(await locks.inspect(k), null)
    })

    test('withLock keeps the routine error and still releases', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      const boom = new Error('boom')
      await assert.rejects(locks.withLock(k, async () => { throw boom }), (err) => err === boom)
      assert.equal(await locks.inspect(k), null)
    })

    test('withLock keeps the lease alive while a routine runs past the ttl', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      // 3.5 leases long. The lease is 600 ms, not 200: with a heartbeat every ttl/3, a 200 ms
      // lease turned `held` false (correctly) whenever one extension took over ~130 ms, which a
      // loaded machine's PostgreSQL did once in a full run.
      await locks.withLock(k, { ttl: 600 }, async (lock) => {
        await sleep(2100)
        assert.equal(lock.held, true)
        assert.equal((await locks.inspect(k)).owner, lock.owner)
      })
    })

    if (b.breakLock) test('withLock rejects with LockLostError when the lock was lost during the routine', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      await assert.rejects(locks.withLock(k, { ttl: 2000, extendEvery: 50 }, async (lock) => {
        await b.breakLock(k)
        await eventually(() => !lock.held, 2000, 'loss')
        return 'done'
      }), (err) => err instanceof LockLostError)
    })

    if (b.breakLock) test('withLock rejects with LockLostError when the routine returns before the loss event is delivered', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      await assert.rejects(locks.withLock(k, { ttl: 2000, extendEvery: 50 }, async (lock) => {
        await b.breakLock(k)
        // Spins on microtasks only: the loss event (a macrotask) cannot be delivered before
        // the routine returns, while the native side already knows the lock is gone.
        const end = Date.now() + 5000
        while (lock.held && Date.now() < end) await null
        assert.equal(lock.held, false, 'the heartbeat did not find the lock gone within 5 s')
        return 'done'
      }), (err) => err instanceof LockLostError)
    })

    test('fencing tokens strictly increase across acquisitions of one key', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      let last = 0n
      for (let i = 0; i < 20; i++) {
        const lock = await locks.acquire(k)
        assert.ok(lock.fencingToken > last)
        last = lock.fencingToken
        await lock.release()
      }
    })

    test('1 500 acquisitions and releases made in one tick all settle, each with its own lock', { timeout: 120_000 }, async (t) => {
      if (await skipUnlessReady(t)) return
      // More numbers than the operations buffer starts with, and (where the store answers
      // them together, as the memory store does) more completions than one drain takes.
      // What is tested is the client's buffers, not the store's latency: a client of its own
      // whose calls may wait on a loaded server (a single etcd member answering 1 500 writes
      // beside other specs: 16 s once, at load 11) longer than the default response timeout,
      // wait and lease.
      const locks = await connect(b.url, { responseTimeout: 30_000 })
      t.after(() => locks.close())
      const keys = Array.from({ length: 1500 }, (_, i) => key(`bulk${i}`))
      const held = await Promise.all(keys.map((k) => locks.acquire(k, { ttl: 60_000, wait: 60_000 })))
      assert.deepEqual(held.map((l) => l.key), keys)
      assert.equal(new Set(held.map((l) => l.owner)).size, keys.length)
      assert.ok(held.every((l) => l.held))
      const busy = await Promise.all(keys.slice(0, 50).map((k) => locks.tryAcquire(k)))
      assert.ok(busy.every((l) => l === null))
      const released = await Promise.all(held.map((l) => l.release()))
      assert.ok(released.every((r) => r === true))
      assert.equal(locks.heldCount, 0)
    })

    test('concurrent waiters in one process never overlap and are all served', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      let inside = 0
      let max = 0
      const served = new Array(10).fill(0)
      await Promise.all(served.map(async (_, w) => {
        for (let i = 0; i < 5; i++) {
          await locks.withLock(k, { wait: 30000, retryDelay: 20 }, async () => {
            inside++
            max = Math.max(max, inside)
            await sleep(1)
            inside--
            served[w]++
          })
        }
      }))
      assert.equal(max, 1)
      assert.deepEqual(served, new Array(10).fill(5))
    })

    test('300 waiters of one client on one key are granted in the order they asked', { timeout: 120_000 }, async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key()
      const order = []
      await Promise.all(Array.from({ length: 300 }, (_, i) => locks.acquire(k, { wait: 100_000 }).then((lock) => {
        order.push(i)
        return lock.release()
      })))
      // Grants that went to a waiter while one that asked earlier still waited.
      const granted = new Set()
      let next = 0
      let early = 0
      for (const w of order) {
        granted.add(w)
        if (w !== next) early++
        while (granted.has(next)) next++
      }
      assert.deepEqual(order, Array.from({ length: 300 }, (_, i) => i), `${early} of 300 granted before an earlier waiter, first ${order.slice(0, 5)}`)
    })

    test('waiters of two clients of one store in one thread are granted in the order they asked', { timeout: 120_000 }, async (t) => {
      if (await skipUnlessReady(t)) return
      // Same URL and options: the two clients share the engine, and so its queue for the key.
      const other = await connect(b.url)
      try {
        const k = key()
        const order = []
        await Promise.all(Array.from({ length: 100 }, (_, i) => (i % 3 ? locks : other).acquire(k, { wait: 100_000 }).then((lock) => {
          order.push(i)
          return lock.release()
        })))
        assert.deepEqual(order, Array.from({ length: 100 }, (_, i) => i))
      } finally {
        await other.close()
      }
    })

    test('after heavy contention the engine keeps nothing: no holds, waiters, timers or subscriptions', async (t) => {
      if (await skipUnlessReady(t)) return
      const own = await connect(b.url)
      try {
        const k = key('leak')
        await Promise.all(Array.from({ length: 20 }, async (_, w) => {
          for (let i = 0; i < 10; i++) {
            const lock = await own.acquire(i % 2 ? k : `${k}:${w}`, { wait: 30000, retryDelay: 5, autoExtend: i % 3 === 0, data: i % 4 === 0 ? 'd' : undefined })
            await sleep(1)
            await lock.release()
          }
        }))
        // Aborted and timed-out waits leave nothing either.
        const holder = await own.acquire(k)
        const ac = new AbortController()
        const aborted = own.acquire(k, { wait: Infinity, signal: ac.signal }).catch((e) => e)
        const timedOut = own.acquire(k, { wait: 50 }).catch((e) => e)
        await sleep(20)
        ac.abort()
        await aborted
        await timedOut
        await holder.release()
        await eventually(() => {
          const s = own.stats()
          return s.held === 0 && s.waiting === 0 && s.scheduled === 0 && s.subscriptions === 0
        }, 3000, `an empty engine, have ${JSON.stringify(own.stats())}`)
      } finally {
        await own.close()
      }
    })

    test('one leader is elected, resign hands leadership over, and leader() names it', async (t) => {
      if (await skipUnlessReady(t)) return
      const name = key('election')
      const elected = []
      const candidates = ['a', 'b', 'c'].map((id) => locks.elect(name, { ttl: 500, data: id, retryDelay: 20, onElected: () => elected.push(id) }))
      await eventually(() => elected.length === 1, 3000, 'a leader')
      await sleep(100)
      assert.equal(candidates.filter((c) => c.isLeader).length, 1)
      const leader = candidates.find((c) => c.isLeader)
      assert.equal((await locks.leader(name)).data, elected[0])
      assert.equal(typeof leader.term, 'bigint')
      const firstTerm = leader.term
      await leader.resign()
      await eventually(() => elected.length === 2, 3000, 'a new leader')
      const next = candidates.find((c) => c.isLeader)
      assert.ok(next.term > firstTerm)
      assert.equal(candidates.filter((c) => c.isLeader).length, 1)
      await Promise.all(candidates.map((c) => c.resign()))
      assert.equal(await locks.leader(name), null)
    })

    test('bad input gets a TypeError or RangeError naming the argument', async (t) => {
      if (await skipUnlessReady(t)) return
      const cases = [
        [() => locks.acquire(), TypeError, /"key"/],
        [() => locks.acquire(7), TypeError, /"key"/],
        [() => locks.acquire(''), TypeError, /'key'/],
        [() => locks.acquire('x'.repeat(1025)), RangeError, /"key.length"/],
        [() => locks.acquire('k', { ttl: 0 }), RangeError, /ttl/],
        [() => locks.acquire('k', { ttl: NaN }), RangeError, /ttl/],
        [() => locks.acquire('k', { ttl: 1.5 }), RangeError, /ttl/],
        [() => locks.acquire('k', { ttl: '10' }), TypeError, /ttl/],
        [() => locks.acquire('k', { wait: -1 }), RangeError, /wait/],
        [() => locks.acquire('k', { jitter: 2 }), RangeError, /jitter/],
        [() => locks.acquire('k', { ttl: 100, extendEvery: 100 }), RangeError, /extendEvery/],
        [() => locks.acquire('k', { data: 42 }), TypeError, /data/],
        [() => locks.acquire('k', { signal: {} }), TypeError, /signal/],
        [() => locks.acquire('k', { onLost: 'x' }), TypeError, /onLost/],
        [() => locks.acquire('k', 'opts'), TypeError, /options/],
        [() => locks.withLock('k', {}), TypeError, /fn/],
        [() => locks.inspect(null), TypeError, /key/],
      ]
      for (const [fn, Class, re] of cases) {
        await assert.rejects(fn, (err) => err instanceof Class && typeof err.code === 'string' && re.test(err.message), String(fn))
      }
      assert.throws(() => locks.elect(''), TypeError)
      assert.throws(() => locks.elect('x', { ttl: -1 }), RangeError)
    })

    test('close releases held locks and later calls reject with ERR_LOCK_CLOSED', async (t) => {
      if (await skipUnlessReady(t)) return
      const own = await connect(b.url)
      const k = key()
      const lock = await own.acquire(k, { autoExtend: true })
      await own.close()
      assert.equal(lock.held, false)
      assert.equal(await locks.inspect(k), null)
      await assert.rejects(own.acquire(key()), { code: 'ERR_LOCK_CLOSED' })
      await own.close()
    })

    test('a reentrant acquire by the holding client returns another hold on the same lock, released with the last hold', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key('reentrant')
      const outer = await locks.acquire(k, { reentrant: true })
      const inner = await locks.acquire(k, { reentrant: true, wait: 0 })
      assert.ok(inner instanceof deadbolt.Lock)
      assert.equal(inner.fencingToken, outer.fencingToken)
      assert.equal(inner.owner, outer.owner)
      assert.equal(await inner.release(), true)
      assert.equal(await inner.release(), false, 'a hold is given back once')
      assert.equal(outer.held, true)
      assert.equal((await locks.inspect(k)).owner, outer.owner, 'still held after the inner release')
      assert.equal(await outer.release(), true)
      assert.equal(await locks.inspect(k), null, 'released with the last hold')
    })

    if (b.breakLock) {
      test('every hold of a reentrant lock hears its loss', async (t) => {
        if (await skipUnlessReady(t)) return
        const k = key('reentrant-lost')
        const heard = []
        const outer = await locks.acquire(k, { reentrant: true, autoExtend: true, ttl: 1000, extendEvery: 50, onLost: () => heard.push('outer') })
        const inner = await locks.acquire(k, { reentrant: true, onLost: (e) => heard.push(e.code) })
        await b.breakLock(k)
        await eventually(() => heard.length === 2, 5000, 'both holds to hear the loss')
        assert.deepEqual(heard.sort(), ['ERR_LOCK_LOST', 'outer'])
        assert.equal(inner.held, false)
        assert.equal(inner.signal.aborted, true)
        const again = await locks.acquire(k, { reentrant: true, wait: 2000 })
        assert.ok(again.fencingToken > outer.fencingToken, 'a new acquisition, not the lost lock')
        await again.release()
        await inner.release()
        await outer.release()
      })
    }

    test('concurrent reentrant acquires of a free key by one client share one acquisition', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key('reentrant-race')
      const holds = await Promise.all([1, 2, 3].map(() => locks.acquire(k, { reentrant: true, wait: 2000 })))
      assert.equal(new Set(holds.map((h) => h.fencingToken)).size, 1)
      await holds[0].release()
      await holds[1].release()
      assert.equal(holds[2].held, true)
      await holds[2].release()
      assert.equal(await locks.inspect(k), null)
    })

    test('a reentrant acquire does not enter a lock that another client holds', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key('reentrant-other')
      const other = await connect(b.url)
      try {
        const theirs = await other.acquire(k, { reentrant: true })
        assert.equal(await locks.tryAcquire(k, { reentrant: true }), null)
        await assert.rejects(locks.acquire(k, { reentrant: true, wait: 50 }), LockAcquisitionError)
        await theirs.release()
        const plain = await locks.acquire(k)
        assert.equal(await locks.tryAcquire(k, { reentrant: true }), null, 'a plain hold is not entered')
        await plain.release()
      } finally {
        await other.close()
      }
    })

    test('acquireAll holds every key with a fencing token each, and release frees them all', async (t) => {
      if (await skipUnlessReady(t)) return
      const keys = [key('all-b'), key('all-a'), key('all-c')]
      const set = await locks.acquireAll(keys)
      assert.ok(set instanceof deadbolt.MultiLock)
      assert.deepEqual(set.keys, keys)
      assert.deepEqual(set.locks.map((l) => l.key), keys)
      assert.equal(set.held, true)
      for (const l of set.locks) assert.equal(typeof l.fencingToken, 'bigint')
      for (const k of keys) assert.equal((await locks.inspect(k)).owner !== undefined, true)
      assert.equal(await set.release(), true)
      assert.equal(set.held, false)
      for (const k of keys) assert.equal(await locks.inspect(k), null)
    })

    test('acquireAll holds none of the keys when one stays busy past the wait', async (t) => {
      if (await skipUnlessReady(t)) return
      const keys = [key('none-a'), key('none-b'), key('none-c')]
      const other = await connect(b.url)
      try {
        const busy = await other.acquire(keys[2])
        await assert.rejects(locks.acquireAll(keys, { wait: 100 }), LockAcquisitionError)
        assert.equal(await locks.inspect(keys[0]), null)
        assert.equal(await locks.inspect(keys[1]), null)
        assert.equal((await locks.inspect(keys[2])).owner, busy.owner)
        await busy.release()
      } finally {
        await other.close()
      }
    })

    test('acquireAll rejects with the loss, holding none, when a key taken first expires while it waits for the next', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key('all-lost')
      const [first, second] = [`${k}:a`, `${k}:b`]
      const other = await connect(b.url)
      try {
        const busy = await other.acquire(second)
        const outcome = locks.acquireAll([second, first], { ttl: 100, wait: 10_000, retryDelay: 10 })
        outcome.catch(() => {})
        await eventually(async () => (await locks.inspect(first)) !== null, 5000, 'the first key taken')
        await eventually(async () => (await locks.inspect(first)) === null, 5000, 'its lease to end')
        await busy.release()
        await assert.rejects(outcome, { code: 'ERR_LOCK_LOST' })
        await eventually(async () => (await locks.inspect(second)) === null, 5000, 'the second key given back')
      } finally {
        await other.close()
      }
    })

    test('acquireAll whose set is complete only past a lease\'s local deadline gives every key back and rejects as not acquired', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key('all-late')
      const stalled = await connect(b.url)
      try {
        // The extension of the key taken first comes back, and the event loop then stalls past
        // its lease before acquireAll sees it (a loaded machine): the set could not be acted on.
        const acquire = stalled.acquire.bind(stalled)
        stalled.acquire = async (name, o) => {
          const lock = await acquire(name, o)
          const extend = lock.extend.bind(lock)
          lock.extend = async (...args) => {
            const r = await extend(...args)
            const until = Date.now() + o.ttl + 50
            while (Date.now() < until) { /* stall */ }
            return r
          }
          return lock
        }
        await assert.rejects(stalled.acquireAll([`${k}:a`, `${k}:b`], { ttl: 300, autoExtend: false }), { code: 'ERR_LOCK_ACQUISITION' })
        await eventually(async () => (await locks.inspect(`${k}:a`)) === null && (await locks.inspect(`${k}:b`)) === null, 5000, 'the keys given back')
      } finally {
        await stalled.close()
      }
    })

    test('acquireAll without a heartbeat resolves with no lease ending before its last key\'s, however long that key took', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key('all-whole')
      const [first, second] = [`${k}:a`, `${k}:b`]
      const other = await connect(b.url)
      try {
        const busy = await other.acquire(second)
        const outcome = locks.acquireAll([second, first], { ttl: 10_000, wait: 10_000, retryDelay: 10, autoExtend: false })
        await eventually(async () => (await locks.inspect(first)) !== null, 5000, 'the first key taken')
        await busy.release()
        const set = await outcome
        const [last, earlier] = set.locks
        // (validUntil is read through the wall clock, to the ms.)
        assert.ok(earlier.validUntil >= last.validUntil - 1, `${earlier.validUntil} < ${last.validUntil}`)
        assert.equal(await set.release(), true)
      } finally {
        await other.close()
      }
    })

    test('acquireAll refuses a key set that is not an array, is empty or repeats a key', async (t) => {
      if (await skipUnlessReady(t)) return
      await assert.rejects(locks.acquireAll('k'), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /"keys"/ })
      await assert.rejects(locks.acquireAll([]), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE', message: /keys\.length/ })
      await assert.rejects(locks.acquireAll(['a', 'b', 'a']), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE', message: /keys\[2\]/ })
      await assert.rejects(locks.acquireAll(['a', 7]), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /keys\[1\]/ })
      await assert.rejects(locks.acquireAll(['a'], { reentrant: true }), { code: 'ERR_INVALID_ARG_VALUE' })
    })

    if (b.crossProcess) {
      test('fencing tokens strictly increase across 1 000 acquisitions by 4 processes', async (t) => {
        if (await skipUnlessReady(t)) return
        const k = key('fence')
        const outs = await Promise.all([0, 1, 2, 3].map(() => runChild(['fence', arg(b.url), k, '250'])))
        const perProcess = outs.map((o) => o.trim().split('\n').map(BigInt))
        const all = perProcess.flat()
        assert.equal(all.length, 1000)
        assert.equal(new Set(all.map(String)).size, 1000, 'every token is unique')
        for (const seq of perProcess) {
          for (let i = 1; i < seq.length; i++) assert.ok(seq[i] > seq[i - 1], 'tokens increase within each process')
        }
      })

      test('acquireAll over overlapping key sets in 3 processes never deadlocks and never overlaps', async (t) => {
        if (await skipUnlessReady(t)) return
        const p = key('all-x')
        const outs = await Promise.all([0, 1, 2].map(() => runChild(['all', arg(b.url), p, '40'])))
        const byKey = new Map()
        for (const line of outs.join('').trim().split('\n')) {
          const [k, token, start, end] = line.split(' ')
          if (!byKey.has(k)) byKey.set(k, [])
          byKey.get(k).push({ token: BigInt(token), start: BigInt(start), end: BigInt(end) })
        }
        let sections = 0
        for (const [k, held] of byKey) {
          held.sort((x, y) => (x.token < y.token ? -1 : 1))
          sections += held.length
          for (let i = 1; i < held.length; i++) {
            assert.ok(held[i].token > held[i - 1].token, `tokens of ${k} repeat`)
            assert.ok(held[i].start >= held[i - 1].end, `${k} was held by two processes at once`)
          }
        }
        assert.equal(sections, 3 * 40 * 3)
      })

      test('when the leader process dies another candidate takes over', async (t) => {
        if (await skipUnlessReady(t)) return
        const name = key('leader')
        const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'child.js'), 'lead', arg(b.url), name, '1500'], { stdio: ['ignore', 'pipe', 'inherit'] })
        t.after(() => child.kill('SIGKILL'))
        await new Promise((resolve) => child.stdout.once('data', resolve))
        let elected = false
        const election = locks.elect(name, { ttl: 1500, retryDelay: 20, onElected: () => { elected = true } })
        // The child leads (the store names its pid), and this candidate does not.
        assert.equal((await locks.leader(name))?.holder?.pid, child.pid)
        assert.equal(election.isLeader, false)
        child.kill('SIGKILL')
        await eventually(() => elected, 10_000, 'takeover')
        assert.equal(election.isLeader, true)
        await election.resign()
      })

      if (b.fairAcrossProcesses) {
        // Without a token the child's refused request still marks the holder's value, so
        // that the release is announced.
        for (const [what, fencing] of [['the lock', true], ['a lock taken with fencing: false', false]]) {
          test(`a waiter in another process that never polls gets ${what} when it is released`, async (t) => {
            if (await skipUnlessReady(t)) return
            const k = key('woken')
            const lock = await locks.acquire(k, { fencing })
            // It asks, is refused, subscribes and asks once more; its next poll is 24 days
            // away, so only the release's announcement can give it the lock.
            const waiter = spawnChild(['wait-for', arg(b.url), k, ...(fencing ? [] : ['unfenced'])])
            try {
              await waiter.said('waiting')
              assert.equal(await lock.release(), true)
              await waiter.said('acquired')
            } finally {
              waiter.kill()
            }
          })
        }

        test('a waiter in another process gets a key that a busy process keeps handing on', async (t) => {
          if (await skipUnlessReady(t)) return
          const k = key('fair')
          // The child keeps 5 local workers cycling through the key (hold 1 ms) for 4 s.
          const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'child.js'), 'churn', arg(b.url), k, '4000'], { stdio: ['ignore', 'pipe', 'inherit'] })
          try {
            await new Promise((resolve) => child.stdout.once('data', resolve))
            await sleep(200)
            const lock = await locks.acquire(k, { wait: 3000 })
            assert.equal((await locks.inspect(k)).owner, lock.owner)
            await lock.release()
          } finally {
            child.kill('SIGKILL')
          }
        })
      }

      test('a held lock with a heartbeat does not keep the process alive', async (t) => {
        if (await skipUnlessReady(t)) return
        const out = await runChild(['hold-and-exit', arg(b.url), key()])
        assert.equal(out.trim(), 'acquired')
      })
    }

    primitiveTests({ b, locks: () => locks, key, skipUnlessReady, runChild, spawnChild, get target() { return arg(b.url) } })
    identityTests({ b, locks: () => locks, key, skipUnlessReady, spawnChild, get target() { return arg(b.url) } })
    webLocksTests({ b, locks: () => locks, key, skipUnlessReady, get target() { return arg(b.url) } })
  })
}

/**
 * The reason `signal` aborts with. Loss notifications never hold the event loop open (by
 * design), so the wait keeps it open with a timer of its own.
 */
function abortReasonOf(signal, ms = 5000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the signal did not abort')), ms)
    signal.addEventListener('abort', () => { clearTimeout(timer); resolve(signal.reason) }, { once: true })
  })
}

/** connect()'s first argument as a child process's command-line argument. */
function arg(url) {
  return typeof url === 'string' ? url : JSON.stringify(url)
}

function runChild(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'child.js'), ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.setEncoding('utf8')
    child.stdout.on('data', (d) => { out += d })
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`child ${args[0]} did not exit`)) }, 60000)
    child.on('exit', (code) => {
      clearTimeout(timer)
      if (code === 0) resolve(out)
      else reject(new Error(`child ${args[0]} exited with ${code}`))
    })
  })
}

/**
 * Starts a child that stays up: `said(text)` resolves once it printed `text`; `kill()` ends
 * it with SIGKILL (harmless once it is gone).
 */
function spawnChild(args) {
  const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'child.js'), ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout.setEncoding('utf8')
  child.stdout.on('data', (d) => { out += d })
  return {
    said: (text) => eventually(() => out.includes(text) || child.exitCode !== null, 20000, `the child to print ${text}`).then(() => {
      if (!out.includes(text)) throw new Error(`child ${args[0]} exited with ${child.exitCode} before printing ${text}`)
    }),
    pid: child.pid,
    kill: () => { if (child.exitCode === null) child.kill('SIGKILL') },
  }
}

module.exports = { apiSuite }
