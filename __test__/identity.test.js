'use strict'
// connect()'s `name` and `identity` options: refused before any I/O when malformed. What they
// do on every store is in identity.shared.js (run by each api.<store>.test.js).

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { connect } = require('..')
const { prefix } = require('./helpers')

const url = () => `memory://${prefix('identity')}`

test('a name that is not a string is refused with a TypeError naming options.name', async () => {
  await assert.rejects(connect(url(), { name: 42 }), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /"options\.name"/ })
})

test('a name with a character outside letters, digits, _ and - is refused', async () => {
  for (const name of ['', 'a.b', 'a b', 'é', 'x'.repeat(65)]) {
    await assert.rejects(connect(url(), { name }), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE', message: /'options\.name'/ }, JSON.stringify(name))
  }
})

test('a name of 64 characters is taken', async (t) => {
  const locks = await connect(url(), { name: 'a'.repeat(64) })
  t.after(() => locks.close())
  const lock = await locks.acquire('k')
  assert.equal((await locks.inspect('k')).holder.name, 'a'.repeat(64))
  await lock.release()
})

test('identity that is not a boolean is refused with a TypeError naming options.identity', async () => {
  await assert.rejects(connect(url(), { identity: 'no' }), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /"options\.identity"/ })
})

test("a lock's owner names its holder, so the Lock itself tells who holds it", async (t) => {
  const locks = await connect(url(), { name: 'worker-7' })
  t.after(() => locks.close())
  const lock = await locks.acquire('k')
  assert.match(lock.owner, new RegExp(`\\.${process.pid}\\.worker-7\\.`))
  await lock.release()
})

test('a lock adopted by another client names the client that adopted it', async (t) => {
  const where = url()
  const first = await connect(where, { name: 'first-worker' })
  const next = await connect(where, { name: 'next-worker' })
  t.after(() => Promise.all([first.close(), next.close()]))
  const lock = await first.acquire('k', { ttl: 5000, autoExtend: true })
  lock.stopExtending()
  const adopted = await next.adopt('k', { owner: lock.owner })
  assert.match(adopted.owner, new RegExp(`\\.${process.pid}\\.next-worker\\.`))
  assert.equal((await next.inspect('k')).holder.name, 'next-worker')
  await adopted.release()
})
