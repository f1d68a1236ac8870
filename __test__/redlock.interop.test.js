'use strict'
// Mixed fleets during a migration: processes on node-redlock (5.0.0-beta.2, and 4.2.0, npm's
// `latest`) and processes on deadbolt's faces, over the same three throwaway Redis servers,
// exclude each other on the same resources and read each other's keys as node-redlock writes
// them. The originals are the real packages (devDependencies `redlock5` and `redlock`).

const { test } = require('node:test')
const assert = require('node:assert/strict')
const Redis = require('ioredis')
const { default: Redlock } = require('../redlock')
const RedlockV4 = require('../redlock/v4')
const { default: Original5 } = require('redlock5')
const Original4 = require('redlock')
const { prefix } = require('./helpers')
const { startRedisServers } = require('./fixtures/redis-server')

/** Three servers and a set of ioredis clients to them per Redlock (as separate processes have). */
async function fleet(t) {
  const servers = await startRedisServers(t, 3)
  if (!servers) return null
  const opened = []
  const clients = () => {
    const cs = servers.map((s) => new Redis(s.url, { maxRetriesPerRequest: 1 }))
    opened.push(...cs)
    return cs
  }
  t.after(async () => {
    for (const c of opened) c.disconnect()
    await Promise.all(servers.map((s) => s.kill()))
  })
  return { servers, clients }
}

const FAST = { retryCount: 0 }

test('a lock held through the face refuses node-redlock 5 on the same resource, and the other way round', async (t) => {
  const f = await fleet(t)
  if (!f) return
  const face = new Redlock(f.clients(), FAST)
  const original = new Original5(f.clients(), FAST)
  const key = prefix('redlock') + 'x'
  const held = await face.acquire([key], 60_000)
  await assert.rejects(original.acquire([key], 60_000), { name: 'ExecutionError' })
  await held.release()
  const theirs = await original.acquire([key], 60_000)
  await assert.rejects(face.acquire([key], 60_000), { name: 'ExecutionError' })
  await theirs.release()
})

test('a lock held through the v4 face refuses node-redlock 4, and node-redlock 4\'s refuses the face', async (t) => {
  const f = await fleet(t)
  if (!f) return
  const face = new RedlockV4(f.clients(), FAST)
  const original = new Original4(f.clients(), FAST)
  const key = prefix('redlock') + 'y'
  const held = await face.lock(key, 60_000)
  await assert.rejects(original.lock(key, 60_000), { name: 'LockError' })
  await held.unlock()
  const theirs = await original.lock(key, 60_000)
  await assert.rejects(face.lock(key, 60_000), { name: 'LockError' })
  await theirs.unlock()
})

test('a multi-resource lock of node-redlock 5 refuses the face on any one of its resources', async (t) => {
  const f = await fleet(t)
  if (!f) return
  const face = new Redlock(f.clients(), FAST)
  const original = new Original5(f.clients(), FAST)
  const p = prefix('redlock')
  const theirs = await original.acquire([`${p}a`, `${p}b`], 60_000)
  await assert.rejects(face.acquire([`${p}b`, `${p}c`], 60_000), { name: 'ExecutionError' })
  const raw = f.clients()
  assert.deepEqual(await Promise.all(raw.map((c) => c.exists(`${p}c`))), [0, 0, 0], 'the free resource was given back')
  await theirs.release()
})

test('on every server the face writes what node-redlock writes: the resource as the key, 32 hex characters, PX the duration', async (t) => {
  const f = await fleet(t)
  if (!f) return
  const raw = f.clients()
  const key = prefix('redlock') + 'w'
  const face = await new Redlock(f.clients(), FAST).acquire([key], 60_000)
  // A grant is reported once a quorum voted; every vote is in once its stats are.
  await Promise.all(face.attempts)
  const faceValues = await Promise.all(raw.map((c) => c.get(key)))
  const faceTtls = await Promise.all(raw.map((c) => c.pttl(key)))
  await Promise.all((await face.release()).attempts)
  const orig = await new Original5(f.clients(), FAST).acquire([key], 60_000)
  await Promise.all(orig.attempts)
  const origValues = await Promise.all(raw.map((c) => c.get(key)))
  await Promise.all((await orig.release()).attempts)
  for (const values of [faceValues, origValues]) {
    assert.equal(new Set(values).size, 1, 'the same value on every server')
    assert.match(values[0], /^[0-9a-f]{32}$/)
  }
  assert.equal(faceValues[0], face.value)
  assert.ok(faceTtls.every((ms) => ms > 59_000 && ms <= 60_000))
  assert.deepEqual(await Promise.all(raw.map((c) => c.exists(key))), [0, 0, 0])
})

test('node-redlock 5 and the face, taking turns on one resource, never hold it at once', async (t) => {
  const f = await fleet(t)
  if (!f) return
  const key = prefix('redlock') + 'turns'
  const settings = { retryCount: -1, retryDelay: 5, retryJitter: 5 }
  const lockers = [
    new Redlock(f.clients(), settings), new Original5(f.clients(), settings),
    new Redlock(f.clients(), settings), new Original5(f.clients(), settings),
  ]
  let inside = 0
  let overlaps = 0
  const turns = { face: 0, original: 0 }
  await Promise.all(lockers.map(async (redlock) => {
    for (let i = 0; i < 10; i++) {
      const lock = await redlock.acquire([key], 10_000)
      inside++
      if (inside > 1) overlaps++
      await new Promise((resolve) => setImmediate(resolve))
      inside--
      turns[redlock instanceof Redlock ? 'face' : 'original']++
      await lock.release()
    }
  }))
  assert.equal(overlaps, 0)
  assert.deepEqual(turns, { face: 20, original: 20 })
})
