'use strict'
// The Redis key layout: no lock name can reach another lock's state, a released name leaves
// nothing behind beyond one counter per hash slot, and tokens never go backwards, across the
// upgrade from the 0.1 layout and beyond 2^53.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { connect } = require('..')
const { REDIS_URL, needRedis, prefix, redisRaw, closeRaw } = require('./helpers')

let locks = null
let ready = false
before(async () => {
  ready = await needRedis({ skip() {} })
  if (ready) locks = await connect(REDIS_URL)
})
after(async () => {
  if (locks) await locks.close()
  closeRaw()
})
const skip = async (t) => !ready && !(await needRedis(t))

/** Every key whose name contains `text` (side keys included), by SCAN. */
async function keysContaining(text) {
  const found = []
  let cursor = '0'
  do {
    const [next, batch] = await redisRaw().scanBuffer(cursor, 'COUNT', 1000)
    cursor = String(next)
    for (const k of batch) if (k.includes(Buffer.from(text))) found.push(k)
  } while (cursor !== '0')
  return found
}

test('a lock named like an old side key ({a}:fence) is a lock of its own after a was used', async (t) => {
  if (await skip(t)) return
  const p = prefix('ns')
  const a = await locks.acquire(`${p}a`)
  await a.release()
  const odd = await locks.tryAcquire(`{${p}a}:fence`)
  assert.ok(odd, 'busy forever in 0.1')
  await odd.release()
})

test('holding {b}:fence does not stop b from being acquired and released', async (t) => {
  if (await skip(t)) return
  const p = prefix('ns')
  const odd = await locks.acquire(`{${p}b}:fence`)
  const b = await locks.acquire(`${p}b`, { wait: 1000 })
  assert.equal(await b.release(), true)
  assert.equal(await locks.inspect(`${p}b`), null, 'b is not left locked by nobody')
  assert.equal(await odd.release(), true)
})

test('a lock named {c}:data is not overwritten or deleted by the data of c', async (t) => {
  if (await skip(t)) return
  const p = prefix('ns')
  const odd = await locks.acquire(`{${p}c}:data`, { ttl: 10_000 })
  const c = await locks.acquire(`${p}c`, { data: 'payload of c' })
  await c.release()
  const info = await locks.inspect(`{${p}c}:data`)
  assert.ok(info, 'still held')
  assert.equal(info.owner, odd.owner)
  assert.equal(await locks.tryAcquire(`{${p}c}:data`), null, 'nobody else is granted it')
  await odd.release()
})

test('x and {x} keep separate data', async (t) => {
  if (await skip(t)) return
  const p = prefix('ns')
  const x = await locks.acquire(`${p}x`, { data: 'plain' })
  const braced = await locks.acquire(`{${p}x}`, { data: 'braced' })
  assert.equal((await locks.inspect(`${p}x`)).data, 'plain')
  assert.equal((await locks.inspect(`{${p}x}`)).data, 'braced')
  await x.release()
  assert.equal((await locks.inspect(`{${p}x}`)).data, 'braced')
  await braced.release()
})

test('2 000 distinct names acquired and released leave no key that names them', async (t) => {
  if (await skip(t)) return
  const p = prefix('bounded')
  for (let i = 0; i < 2000; i += 100) {
    const batch = await Promise.all(Array.from({ length: 100 }, (_, j) => locks.acquire(`${p}${i + j}`, { data: 'd' })))
    await Promise.all(batch.map((l) => l.release()))
  }
  assert.deepEqual(await keysContaining(p), [])
  // What remains is one counter per hash slot, whatever the number of names.
  const counters = await keysContaining('deadbolt:fence:')
  assert.ok(counters.length <= 16384, `${counters.length} counters`)
})

test('the inspect of a held lock reports the holder and its token', async (t) => {
  if (await skip(t)) return
  const k = prefix('inspect') + 'k'
  const lock = await locks.acquire(k)
  const info = await locks.inspect(k)
  assert.equal(info.owner, lock.owner)
  assert.equal(info.fencingToken, lock.fencingToken)
  await lock.release()
})

test('a counter left by version 0.1 is carried over once, so tokens never go backwards, and then deleted', async (t) => {
  if (await skip(t)) return
  const k = prefix('upgrade') + 'k'
  await redisRaw().set(`{${k}}:fence`, '41')
  const first = await locks.acquire(k)
  assert.ok(first.fencingToken >= 42n, String(first.fencingToken))
  await first.release()
  assert.equal(await redisRaw().exists(`{${k}}:fence`), 0, 'the old counter is gone')
  const second = await locks.acquire(k)
  assert.ok(second.fencingToken > first.fencingToken)
  await second.release()
})

test('a key that merely looks like a 0.1 counter (it expires) is left alone', async (t) => {
  if (await skip(t)) return
  const k = prefix('upgrade') + 'held'
  await redisRaw().set(`{${k}}:fence`, '99999999', 'PX', 60_000)
  const lock = await locks.acquire(k)
  await lock.release()
  assert.equal(await redisRaw().get(`{${k}}:fence`), '99999999')
  await redisRaw().del(`{${k}}:fence`)
})

test('fencing tokens above 2^53 are carried exactly', async (t) => {
  if (await skip(t)) return
  const k = prefix('big') + 'k'
  // 2^53 + 1: the first integer an f64 cannot hold.
  await redisRaw().set(`{${k}}:fence`, '9007199254740993')
  const first = await locks.acquire(k)
  assert.equal(first.fencingToken, 9007199254740994n)
  assert.equal((await locks.inspect(k)).fencingToken, 9007199254740994n)
  await first.release()
  const second = await locks.acquire(k)
  assert.equal(second.fencingToken, 9007199254740995n)
  await second.release()
})
