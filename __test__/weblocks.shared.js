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
  const proc = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'weblocks-child.js'), ...args], { stdio: ['pipe', 'pipe', 'inherit'] })
  let out = ''
  proc.stdout.setEncoding('utf8')
  proc.stdout.on('data', (d) => { out += d })
  return {
    said: (re) => eventually(() => re.exec(out) ?? (proc.exitCode !== null && proc.exitCode !== 0 && Promise.reject(new Error(`child exited with ${proc.exitCode}`))), 20000, `the child to print ${re}`),
    exited: () => eventually(() => proc.exitCode !== null, 20000, 'the child to exit').then(() => proc.exitCode),
    tell: (line) => proc.stdin.write(`${line}\n`),
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
      // Pending here is this process's view: the waiter's place in the store's queue may not be
      // taken yet (a loaded machine), and then the stealer is served first and the waiter after
      // it, with nothing to steal from it. Nor does the stealer's callback tell which came
      // first: the store may have granted the waiter already, its grant not yet in its
      // process's callback. So the outcome says it: both stolen from (the waiter was served
      // first), or the holder stolen from and the waiter granted after the stealer.
      const token = await c.locks().request(name, { steal: true }, (lock) => lock.fencingToken)
      assert.equal(typeof token, 'bigint')
      await eventually(() => outcomes.length === 2 || (waiterGranted && outcomes.length === 1), 20000,
        'the holder and the waiter to hear of the steal, or the waiter to be granted after the stealer')
      if (outcomes.length === 2) {
        assert.deepEqual(outcomes.sort(), ['holder AbortError', 'waiter AbortError'])
      } else {
        assert.deepEqual(outcomes, ['holder AbortError'])
        t.diagnostic('the stealer was served before the waiter: the steal from a waiter was not played')
      }
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

  test('adopt moves a lock another client holds to a new owner with a higher fencing token and its payload, then extends and releases it', async (t) => {
    if (await skipUnlessReady(t)) return
    const other = await otherClient(b.url)
    try {
      const k = key('adopt')
      const original = await other.acquire(k, { ttl: 2000, autoExtend: true, data: 'payload' })
      assert.equal(original.stopExtending(), true)
      const adopted = await c.locks().adopt(k, { owner: original.owner, ttl: 2000, autoExtend: true })
      assert.ok(adopted instanceof Lock)
      assert.notEqual(adopted.owner, original.owner)
      assert.ok(adopted.owner.startsWith(`${c.locks().clientId}.`), 'an owner of the adopting client')
      assert.ok(adopted.fencingToken > original.fencingToken)
      // Past the original lease: the adopter's heartbeat keeps it.
      const originalEnd = original.validUntil
      await eventually(() => Date.now() > originalEnd + 100, 10000, 'the original lease to end')
      assert.equal(adopted.held, true)
      assert.equal((await c.locks().inspect(k)).owner, adopted.owner)
      assert.equal((await c.locks().inspect(k)).data, 'payload')
      assert.equal(await adopted.release(), true)
      assert.equal(await c.locks().inspect(k), null)
    } finally {
      await other.close()
    }
  })

  test('adopting a lock whose holder still extends it takes it: the former holder hears of its loss at its next renewal', async (t) => {
    if (await skipUnlessReady(t)) return
    const other = await otherClient(b.url)
    try {
      const k = key('adopt')
      const original = await other.acquire(k, { ttl: 1500, autoExtend: true })
      const { signal } = original
      const adopted = await c.locks().adopt(k, { owner: original.owner, ttl: 1500, autoExtend: true })
      assert.ok(adopted.fencingToken > original.fencingToken)
      await eventually(() => signal.aborted, 10000, 'the former holder to hear of its loss')
      assert.equal(signal.reason.reason, 'not-owned')
      assert.equal(original.held, false)
      assert.equal(adopted.held, true)
      assert.equal((await c.locks().inspect(k)).owner, adopted.owner)
      assert.equal(await original.release(), false)
      assert.equal(await adopted.release(), true)
    } finally {
      await other.close()
    }
  })

  test('of two clients adopting one lock at once, one takes it and the other resolves null', async (t) => {
    if (await skipUnlessReady(t)) return
    const [first, second] = [await otherClient(b.url), await otherClient(b.url)]
    try {
      const k = key('adopt')
      const original = await c.locks().acquire(k, { ttl: 5000, autoExtend: true })
      original.stopExtending()
      const got = await Promise.all([first.adopt(k, { owner: original.owner }), second.adopt(k, { owner: original.owner })])
      const won = got.filter((l) => l !== null)
      assert.equal(won.length, 1, 'one adopter')
      assert.equal((await c.locks().inspect(k)).owner, won[0].owner)
      assert.equal(await won[0].release(), true)
    } finally {
      await Promise.all([first.close(), second.close()])
    }
  })

  test('adopting a lock the same client holds ends the original hold at once', async (t) => {
    if (await skipUnlessReady(t)) return
    const locks = c.locks()
    const k = key('adopt')
    const original = await locks.acquire(k, { ttl: 5000, autoExtend: true })
    const { signal } = original
    const adopted = await locks.adopt(k, { owner: original.owner })
    assert.equal(original.held, false)
    await eventually(() => signal.aborted, 5000, 'the original to hear of its loss')
    assert.equal(signal.reason.reason, 'not-owned')
    assert.equal(await adopted.release(), true)
    assert.equal(await locks.inspect(k), null)
    assert.equal(original.held, false)
    assert.equal(await original.release(), false)
  })

  test('a lock adopted with fencing: false has no fencing token', async (t) => {
    if (await skipUnlessReady(t)) return
    const locks = c.locks()
    const k = key('adopt')
    const original = await locks.acquire(k, { ttl: 5000, fencing: false })
    original.stopExtending()
    const adopted = await locks.adopt(k, { owner: original.owner, fencing: false })
    assert.equal(adopted.fencingToken, null)
    assert.equal(adopted.toJSON().fencingToken, null)
    assert.equal(await adopted.release(), true)
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
    assert.equal((await c.locks().inspect(k))?.owner, adopted.owner)
    assert.equal(await adopted.release(), true)
  })

  test('stopExtending on a nested reentrant hold returns false and leaves the shared heartbeat running', async (t) => {
    if (await skipUnlessReady(t)) return
    const locks = c.locks()
    const k = key('stop')
    const outer = await locks.acquire(k, { reentrant: true, ttl: 1000, autoExtend: true })
    const inner = await locks.acquire(k, { reentrant: true })
    assert.equal(inner.stopExtending(), false)
    const end = outer.validUntil
    await eventually(() => Date.now() > end + 200, 10000, 'the first lease to have ended')
    assert.equal(outer.held, true, 'still extended')
    assert.equal(await inner.release(), true)
    assert.equal(outer.stopExtending(), true, 'the last open hold may stop it')
    assert.equal(await outer.release(), true)
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

    test('web locks: a holder in another process whose callback ends after a steal, before its next heartbeat, rejects with AbortError', async (t) => {
      if (await skipUnlessReady(t)) return
      const name = key('web')
      // The default lease: its next heartbeat is seconds away when the callback ends.
      const p = child(['hold-until-told', c.target, name])
      try {
        await p.said(/held /)
        await c.locks().request(name, { steal: true }, async () => {
          p.tell('end')
          const [, outcome] = await p.said(/(resolved|rejected \S+ \S+)\n/)
          assert.equal(outcome, 'rejected AbortError ERR_LOCK_LOST')
        })
        assert.equal(await p.exited(), 0)
      } finally {
        p.kill()
      }
    })

    test('a lock a process stopped extending and left is adopted by another process, gets a higher token and outlives its lease', async (t) => {
      if (await skipUnlessReady(t)) return
      const k = key('adopt')
      const p = child(['leave', c.target, k])
      const [, owner, token, validUntil] = await p.said(/(\S+) (\d+) (\d+)\n/)
      assert.equal(await p.exited(), 0)
      const lock = await c.locks().adopt(k, { owner, ttl: 1500, autoExtend: true })
      assert.ok(lock, 'the lease was left to lapse, not released, by the closing process')
      assert.ok(lock.fencingToken > BigInt(token))
      await eventually(() => Date.now() > Number(validUntil) + 100, 10000, 'the original lease to end')
      assert.equal(lock.held, true)
      assert.equal((await c.locks().inspect(k)).owner, lock.owner)
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
