'use strict'
// The Web Locks scenarios against the running Node's own `navigator.locks` (Node >= 24.5), to
// show that deadbolt's `request` and `query` answer as Node's do (the scenarios where Node
// departs from the specification are reported as todo: other Node versions may not); and the
// argument checks of `request` and `adopt`, which need no server. weblocks.node24.test.js runs
// the same comparison under a fetched Node 24 whatever Node runs this file.

const { describe, test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { scenarios, nodeDivergences } = require('./weblocks.scenarios')
const { prefix, eventually, needRedis, REDIS_URL } = require('./helpers')
const { tcpProxy } = require('./fixtures/tcp-proxy')
const { connect, LockClosedError } = require('..')

const nodeLocks = globalThis.navigator?.locks ?? require('node:worker_threads').locks
const skip = nodeLocks === undefined && `Node ${process.versions.node} has no navigator.locks (Node >= 24.5 has): weblocks.node24.test.js compares under Node 24`

describe('Node\'s own navigator.locks answers the Web Locks scenarios as deadbolt does', { skip }, () => {
  const run = prefix('node-weblocks')
  let n = 0
  for (const [title, scenario] of scenarios) {
    const name = `${run}${++n}`
    test(title, { todo: nodeDivergences.get(title) }, () => scenario(nodeLocks, name))
  }
})

describe('request and adopt refuse bad arguments before any I/O', () => {
  let locks
  before(async () => { locks = await connect('memory://weblocks-args') })
  after(() => locks.close())

  const typeError = (code) => (err) => err instanceof TypeError && err.code === code

  test('request refuses a name that is not a string', async () => {
    await assert.rejects(locks.request(1, () => {}), typeError('ERR_INVALID_ARG_TYPE'))
  })

  test('request refuses an empty name, which no store can hold', async () => {
    await assert.rejects(locks.request('', () => {}), typeError('ERR_INVALID_ARG_VALUE'))
  })

  test('request refuses a missing callback', async () => {
    await assert.rejects(locks.request('n', {}), typeError('ERR_INVALID_ARG_TYPE'))
  })

  test('request refuses a mode other than exclusive or shared', async () => {
    await assert.rejects(locks.request('n', { mode: 'read' }, () => {}), typeError('ERR_INVALID_ARG_VALUE'))
  })

  test('request refuses an option it does not know', async () => {
    await assert.rejects(locks.request('n', { ifAvailible: true }, () => {}), typeError('ERR_INVALID_ARG_VALUE'))
  })

  test('request refuses a steal that is not a boolean', async () => {
    await assert.rejects(locks.request('n', { steal: 1 }, () => {}), typeError('ERR_INVALID_ARG_TYPE'))
  })

  test('request on a closed client rejects with LockClosedError', async () => {
    const closed = await connect('memory://weblocks-args')
    await closed.close()
    await assert.rejects(closed.request('n', () => {}), (err) => err instanceof LockClosedError)
  })

  test('adopt refuses a missing owner', async () => {
    await assert.rejects(locks.adopt('k'), typeError('ERR_INVALID_ARG_TYPE'))
    await assert.rejects(locks.adopt('k', {}), typeError('ERR_INVALID_ARG_TYPE'))
  })

  test('adopt refuses an empty owner', async () => {
    await assert.rejects(locks.adopt('k', { owner: '' }), typeError('ERR_INVALID_ARG_VALUE'))
  })

  test('adopt refuses an option it does not know', async () => {
    await assert.rejects(locks.adopt('k', { owner: 'o', wait: 1 }), typeError('ERR_INVALID_ARG_VALUE'))
  })

  test('adopt refuses a ttl out of range', async () => {
    await assert.rejects(locks.adopt('k', { owner: 'o', ttl: 0 }), (err) => err instanceof RangeError && err.code === 'ERR_OUT_OF_RANGE')
  })

  test('a semaphore\'s and a read-write lock\'s adopt refuse a missing owner', async () => {
    await assert.rejects(locks.semaphore('s', { limit: 2 }).adopt({}), typeError('ERR_INVALID_ARG_TYPE'))
    await assert.rejects(locks.readWriteLock('r').adopt(), typeError('ERR_INVALID_ARG_TYPE'))
  })
})

describe('a lease let lapse by stopExtending ends without a process warning', () => {
  /** Runs `fn(locks, key)`, then waits for its lock to lapse and its loss to be reported. */
  async function warningsOf(fn) {
    const warnings = []
    const onWarning = (w) => warnings.push(w)
    process.on('warning', onWarning)
    const locks = await connect('memory://weblocks-lapse')
    try {
      await fn(locks, `${prefix('lapse')}k`)
      await eventually(() => locks.stats().held === 0, 10000, 'the lease to lapse')
      // An unheard loss is reported at setImmediate, and its warning emitted on the next tick.
      await new Promise((resolve) => setImmediate(resolve))
      await new Promise((resolve) => setImmediate(resolve))
      return warnings
    } finally {
      process.off('warning', onWarning)
      await locks.close()
    }
  }

  test('a lock nobody listens to warns when it lapses unasked, not once its holder stopped extending it', async () => {
    assert.equal((await warningsOf((locks, k) => locks.acquire(k, { ttl: 200 }))).length, 1)
    assert.deepEqual(await warningsOf(async (locks, k) => {
      const lock = await locks.acquire(k, { ttl: 200, autoExtend: true })
      lock.stopExtending()
    }), [])
  })

  test('the last open hold of a reentrant lock stops the shared lease, which then lapses without a warning', async () => {
    let outer
    assert.deepEqual(await warningsOf(async (locks, k) => {
      outer = await locks.acquire(k, { reentrant: true, ttl: 200, autoExtend: true })
      const inner = await locks.acquire(k, { reentrant: true, ttl: 200, autoExtend: true })
      assert.equal(inner.stopExtending(), false, 'a nested hold leaves the shared heartbeat alone')
      assert.equal(await inner.release(), true)
      assert.equal(outer.stopExtending(), true)
    }), [])
    assert.equal(outer.held, false)
  })
})

describe('a WebLock reads its lease as a Lock does', () => {
  test('held and validUntil are true and a future time in the callback, false and null after it', async () => {
    const locks = await connect('memory://weblocks-held')
    try {
      let seen = null
      await locks.request(`${prefix('wl-held')}k`, async (lock) => {
        seen = lock
        assert.equal(lock.held, true)
        assert.ok(lock.validUntil > Date.now(), `validUntil ${lock.validUntil}`)
      })
      assert.equal(seen.held, false)
      assert.equal(seen.validUntil, null)
    } finally {
      await locks.close()
    }
  })

  test('held turns false at the lease\'s local deadline before any loss is heard, when its extensions go unanswered', async (t) => {
    if (!(await needRedis(t))) return
    const proxy = await tcpProxy(Number(new URL(REDIS_URL).port || 6379))
    const locks = await connect(`redis://127.0.0.1:${proxy.port}`, { ttl: 1000, responseTimeout: 5000 })
    try {
      const outcome = locks.request(`${prefix('wl-deadline')}k`, async (lock) => {
        const deadline = lock.validUntil
        assert.equal(lock.held, true)
        proxy.pause()
        // The event loop blocked past the local deadline: no loss can have been delivered.
        while (Date.now() <= deadline + 5) { /* spin */ }
        assert.equal(lock.signal.aborted, false, 'the loss was heard: the test proves nothing')
        assert.equal(lock.held, false, 'held was still true past the lease\'s local deadline')
        assert.equal(lock.validUntil, null)
      })
      await assert.rejects(outcome, (err) => err.code === 'ERR_LOCK_LOST' || err.name === 'AbortError')
    } finally {
      proxy.resume()
      await locks.close()
      await proxy.close()
    }
  })
})
