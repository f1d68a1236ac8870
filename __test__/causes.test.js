'use strict'
// Every error that has a `cause` gives that cause a `code` too, down the whole chain, so that
// a program can tell what happened without reading a message. One test per place in the
// package that builds an error with a cause; refused ports stand in for dead servers.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { connect, createLock, initialize, getLock, close, LockExtendError, LockLostError, LockClosedError } = require('..')
const { freePort, prefix, eventually, needMysql, MYSQL_URL } = require('./helpers')

/** Fails unless every cause in `err`'s chain carries a string `code`; the chain's codes. */
function codedChain(err) {
  const codes = [err.code]
  for (let e = err; e.cause !== undefined && e.cause !== null; e = e.cause) {
    assert.equal(typeof e.cause.code, 'string', `the cause of ${e.name} (${e.message}) has no code`)
    codes.push(e.cause.code)
  }
  return codes
}

test('a backend error from a Redis that is not there has a coded cause', async () => {
  const err = await connect(`redis://127.0.0.1:${await freePort()}`, { connectTimeout: 1_000 }).then(() => assert.fail('connected'), (e) => e)
  assert.deepEqual(codedChain(err), ['ERR_LOCK_BACKEND', 'ERR_LOCK_STORE_UNREACHABLE'])
})

test('a backend error from a MySQL that is not there has a coded cause', async () => {
  const err = await connect(`mysql://root@127.0.0.1:${await freePort()}/test`, { connectTimeout: 1_000 }).then(() => assert.fail('connected'), (e) => e)
  assert.deepEqual(codedChain(err), ['ERR_LOCK_BACKEND', 'ERR_LOCK_STORE_UNREACHABLE'])
})

test('a backend error from a PostgreSQL that is not there has a coded cause, and no password', async () => {
  const err = await connect(`postgres://postgres:S3cretPw@127.0.0.1:${await freePort()}/test`, { connectTimeout: 1_000 }).then(() => assert.fail('connected'), (e) => e)
  assert.deepEqual(codedChain(err), ['ERR_LOCK_BACKEND', 'ERR_LOCK_STORE_UNREACHABLE'])
  assert.ok(!`${err.message} ${err.cause.message}`.includes('S3cretPw'), err.message)
})

test('extending a lost lock fails with a LockExtendError whose cause is the coded LockLostError', async () => {
  const locks = await connect('memory://causes')
  try {
    let lost = null
    const lock = await locks.acquire(prefix('causes') + 'k', { ttl: 30, onLost: (e) => { lost = e } })
    await eventually(() => lost !== null, 5_000, 'the loss')
    const err = await lock.extend(1_000).then(() => assert.fail('extended'), (e) => e)
    assert.ok(err instanceof LockExtendError)
    assert.ok(err.cause instanceof LockLostError)
    assert.deepEqual(codedChain(err), ['ERR_LOCK_EXTEND', 'ERR_LOCK_LOST'])
  } finally {
    await locks.close()
  }
})

test("the redislock face's acquisition error from a Redis that is not there has coded causes down the chain", async () => {
  const lock = createLock(`redis://127.0.0.1:${await freePort()}`, { timeout: 1_000 })
  const err = await lock.acquire(prefix('causes') + 'k').then(() => assert.fail('acquired'), (e) => e)
  assert.deepEqual(codedChain(err), ['ERR_LOCK_ACQUISITION', 'ERR_LOCK_BACKEND', 'ERR_LOCK_STORE_UNREACHABLE'])
})

test("the redislock face's error for an unparsable URL has a coded cause", () => {
  const err = (() => { try { createLock({ url: 'redis://[bad' }) } catch (e) { return e } })()
  assert.deepEqual(codedChain(err), ['ERR_INVALID_ARG_VALUE', 'ERR_INVALID_URL'])
})

test("the sql-lock face's initialization error from a MySQL that is not there has coded causes down the chain", async () => {
  try {
    const err = await initialize(`mysql://root@127.0.0.1:${await freePort()}/test`, { connectTimeout: 1_000 }).then(() => assert.fail('initialized'), (e) => e)
    assert.deepEqual(codedChain(err), ['ERR_LOCK_INITIALIZATION_FAILED', 'ERR_LOCK_BACKEND', 'ERR_LOCK_STORE_UNREACHABLE'])
  } finally {
    await close()
  }
})

test("the sql-lock face's getLock interrupted by close() fails with a LockClosedError, any cause of it coded", async (t) => {
  if (!(await needMysql(t))) return
  await initialize(MYSQL_URL, { connectTimeout: 3_000 })
  const key = prefix('causes') + 'k'
  const release = await getLock(key, 10_000)
  const waiting = getLock(key, 10_000).then(() => assert.fail('acquired'), (e) => e)
  // Closed while the second getLock waits (the first still holds the key).
  setTimeout(() => close(), 50)
  const err = await waiting
  assert.ok(err instanceof LockClosedError, `${err.name}: ${err.message}`)
  // The cancelled wait (ERR_LOCK_ABORTED) is the cause when close() interrupts it mid-way.
  assert.equal(codedChain(err)[0], 'ERR_LOCK_CLOSED')
  void release
})
