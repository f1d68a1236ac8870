'use strict'
// No secret ever appears in an error, util.inspect or JSON: not the password of a URL.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const util = require('node:util')
const { connect, createLock } = require('..')
const { REDIS_URL, needRedis, needMysql, prefix } = require('./helpers')

const SECRET = 'S3cr3t-pa55'

function assertClean(text, what) {
  assert.equal(typeof text, 'string')
  assert.ok(!text.includes(SECRET), `${what} shows the password: ${text}`)
}

function errorText(err) {
  return [err.message, err.stack, util.inspect(err, { depth: 5 }), err.cause && util.inspect(err.cause, { depth: 5 })].join('\n')
}

test('util.inspect and JSON of a client and a lock never show the password', async () => {
  // A lazy client does no I/O, so the URL needs no server behind it.
  const lazy = await connect(`mysql://root:${SECRET}@127.0.0.1:1/test`, { lazy: true })
  assertClean(util.inspect(lazy, { depth: 10, showHidden: true }), 'util.inspect(client)')
  assertClean(JSON.stringify(lazy), 'JSON.stringify(client)')
  assert.match(util.inspect(lazy), /\*\*\*/)
  await lazy.close()
  const locks = await connect(`mysql://root:${SECRET}@127.0.0.1:1/test`, { lazy: true })
  // A memory store's name is free text, so its URL can carry a password too.
  const memory = await connect(`memory://user:${SECRET}@secrets`)
  const lock = await memory.acquire(prefix('secret') + 'k')
  assertClean(util.inspect(lock, { depth: 10, showHidden: true }), 'util.inspect(lock)')
  assert.doesNotThrow(() => JSON.stringify(lock))
  assert.deepEqual(Object.keys(JSON.parse(JSON.stringify(lock))).sort(), ['fencingToken', 'held', 'key', 'owner', 'ttl'])
  await locks.close()
  await memory.close()
})

test('the error for an unsupported scheme does not echo the URL', async () => {
  await assert.rejects(connect(`foo://user:${SECRET}@host/db`), (err) => {
    assert.equal(err.code, 'ERR_INVALID_ARG_VALUE')
    assertClean(errorText(err), 'the error')
    return true
  })
  assert.throws(() => createLock(`foo://user:${SECRET}@host`), (err) => {
    assertClean(errorText(err), 'the redislock face error')
    return true
  })
})

test("an unparsable URL in a redislock client's options does not show the password, not even in the cause", () => {
  assert.throws(() => createLock({ url: `redis://user:${SECRET}@[bad` }), (err) => {
    assert.equal(err.code, 'ERR_INVALID_ARG_VALUE')
    assert.equal(err.cause.code, 'ERR_INVALID_URL')
    assertClean(errorText(err), 'the error')
    return true
  })
})

test('a MySQL login refused with a wrong password does not show the password', async (t) => {
  if (!(await needMysql(t))) return
  await assert.rejects(connect(`mysql://nobody-${prefix('u').slice(-6)}:${SECRET}@127.0.0.1:3306/test`, { connectTimeout: 3000 }), (err) => {
    assert.equal(err.code, 'ERR_LOCK_BACKEND')
    assertClean(errorText(err), 'the error')
    return true
  })
})

test('a Redis login refused with a wrong password does not show the password', async (t) => {
  if (!(await needRedis(t))) return
  const u = new URL(REDIS_URL)
  await assert.rejects(connect(`redis://nobody:${SECRET}@${u.host}`, { connectTimeout: 3000 }), (err) => {
    assert.equal(err.code, 'ERR_LOCK_BACKEND')
    assertClean(errorText(err), 'the error')
    return true
  })
})
