'use strict'
// Who holds a lock (host, pid, the client's `name`), on every backend: called by apiSuite
// inside its describe, with its client, key maker and server check.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const os = require('node:os')
const { connect } = require('..')
const { eventually } = require('./helpers')

/**
 * @param {object} c  as primitiveTests takes it (primitives.shared.js)
 */
function identityTests(c) {
  const { b, key, skipUnlessReady } = c

  /** A client of the test's own on this backend, closed when the test ends. */
  async function client(t, options) {
    const locks = await connect(b.url, options)
    t.after(() => locks.close())
    return locks
  }

  const me = (name) => ({ host: os.hostname(), pid: process.pid, name })

  test(`inspect and list name the holder's host, pid and client name on ${b.name}`, async (t) => {
    if (await skipUnlessReady(t)) return
    const k = key('who')
    const holder = await client(t, { name: 'billing-worker' })
    const lock = await holder.acquire(k)
    const info = await c.locks().inspect(k)
    assert.equal(info.owner, lock.owner)
    assert.deepEqual(info.holder, me('billing-worker'))
    const [listed] = await c.locks().list(k)
    assert.deepEqual(listed.holder, me('billing-worker'))
    await lock.release()
  })

  test(`a client without a name is shown with its host and pid on ${b.name}`, async (t) => {
    if (await skipUnlessReady(t)) return
    const k = key('anon')
    const lock = await c.locks().acquire(k)
    const info = await c.locks().inspect(k)
    assert.deepEqual(info.holder, me(null))
    await lock.release()
  })

  test(`a client connected with identity: false writes a bare owner on ${b.name}`, async (t) => {
    if (await skipUnlessReady(t)) return
    const k = key('bare')
    const holder = await client(t, { name: 'ignored', identity: false })
    const lock = await holder.acquire(k)
    const info = await c.locks().inspect(k)
    assert.equal(info.holder, null)
    assert.ok(!lock.owner.includes(String(process.pid)), 'the owner carries no pid')
    await lock.release()
  })

  test(`the longest identity fits ${b.name}'s owner limit`, async (t) => {
    if (await skipUnlessReady(t)) return
    const k = key('long')
    const name = 'n'.repeat(64)
    // A long host name made of bytes that are escaped (three characters each), cut at 80.
    const hostname = os.hostname
    os.hostname = () => 'é.'.repeat(100)
    let holder
    try {
      holder = await client(t, { name })
    } finally {
      os.hostname = hostname
    }
    const lock = await holder.acquire(k)
    const info = await c.locks().inspect(k)
    assert.equal(info.holder.name, name)
    assert.equal(info.holder.pid, process.pid)
    assert.ok('é.'.repeat(100).startsWith(info.holder.host.replace(/\uFFFD$/, '')), 'the host is a prefix of the real one')
    assert.equal(await lock.release(), true)
  })

  test(`semaphore and read-write lock holders name their holder on ${b.name}`, async (t) => {
    if (await skipUnlessReady(t)) return
    const holder = await client(t, { name: 'sem-worker' })
    const sem = holder.semaphore(key('sem'), { limit: 2 })
    const permit = await sem.acquire()
    assert.deepEqual((await c.locks().semaphore(sem.name, { limit: 2 }).holders()).map((h) => h.holder), [me('sem-worker')])
    await permit.release()
    const rw = holder.readWriteLock(key('rw'))
    const read = await rw.read()
    assert.deepEqual((await c.locks().readWriteLock(rw.name).holders()).map((h) => h.holder), [me('sem-worker')])
    await read.release()
  })

  test(`leader() names the leader's host, pid and client name on ${b.name}`, async (t) => {
    if (await skipUnlessReady(t)) return
    const name = key('elect')
    const holder = await client(t, { name: 'leader-1' })
    const election = holder.elect(name)
    t.after(() => election.resign())
    await eventually(() => election.isLeader, 10000, 'the candidate to lead')
    assert.deepEqual((await c.locks().leader(name)).holder, me('leader-1'))
  })

  if (b.crossProcess) {
    test(`a holder in another process is shown with that process's pid on ${b.name}`, async (t) => {
      if (await skipUnlessReady(t)) return
      const name = key('sem-child')
      const child = c.spawnChild(['hold-permits', c.target, name])
      try {
        await child.said('acquired')
        const holders = await c.locks().semaphore(name, { limit: 3 }).holders()
        assert.deepEqual(holders.map((h) => h.holder), [{ host: os.hostname(), pid: child.pid, name: null }])
      } finally {
        child.kill()
      }
    })
  }
}

module.exports = { identityTests }
