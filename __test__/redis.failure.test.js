'use strict'
// Failures of the store as a Redis user meets them: a server that is not there, a network
// that stops answering, a lock found gone. Each must be a prompt, typed error or a loud
// loss, never a hang or a silently lost lock.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { connect, LockBackendError, LockLostError } = require('..')
const { REDIS_URL, needRedis, prefix, redisRaw, closeRaw } = require('./helpers')
const { tcpProxy } = require('./fixtures/tcp-proxy')

after(closeRaw)

function lostReason(lock, ms) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the lock was not reported lost')), ms)
    lock.signal.addEventListener('abort', () => { clearTimeout(timer); resolve(lock.signal.reason) }, { once: true })
  })
}

test('connect to a Redis that is not there rejects with LockBackendError and a cause', async () => {
  await assert.rejects(connect('redis://127.0.0.1:1', { connectTimeout: 1000 }), (err) => {
    assert.ok(err instanceof LockBackendError)
    assert.equal(err.code, 'ERR_LOCK_BACKEND')
    assert.ok(err.cause instanceof Error)
    // The kind travels as data: nobody has to read the message.
    assert.equal(err.cause.code, 'ERR_LOCK_STORE_UNREACHABLE')
    return true
  })
})

test('a malformed URL is a TypeError before any I/O', async () => {
  await assert.rejects(connect('redis://127.0.0.1:notaport'), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE' })
  await assert.rejects(connect('http://127.0.0.1:6379'), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE' })
  await assert.rejects(connect(6379), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })
})

test('an acquisition over a network that stopped answering fails within the response timeout', async (t) => {
  if (!(await needRedis(t))) return
  const proxy = await tcpProxy(Number(new URL(REDIS_URL).port || 6379))
  const locks = await connect(`redis://127.0.0.1:${proxy.port}`, { responseTimeout: 300, connectTimeout: 300 })
  try {
    proxy.pause()
    await assert.rejects(locks.acquire(prefix('partition') + 'k', { wait: Infinity }), (err) => {
      assert.ok(err instanceof LockBackendError, err.stack)
      return true
    })
  } finally {
    await locks.close()
    await proxy.close()
  }
})

test('a partition during a heartbeat is reported as a loss within the lease', async (t) => {
  if (!(await needRedis(t))) return
  const proxy = await tcpProxy(Number(new URL(REDIS_URL).port || 6379))
  const locks = await connect(`redis://127.0.0.1:${proxy.port}`, { responseTimeout: 200, connectTimeout: 200 })
  try {
    const k = prefix('partition') + 'hb'
    const ttl = 1500
    const lock = await locks.acquire(k, { ttl, autoExtend: true, extendEvery: 250 })
    const lost = lostReason(lock, 10_000)
    proxy.pause()
    const pausedAt = performance.now()
    const reason = await lost
    const after = performance.now() - pausedAt
    assert.ok(reason instanceof LockLostError)
    assert.equal(reason.reason, 'unreachable')
    assert.equal(lock.held, false)
    // The last extension that got through was sent before the pause, so the local deadline
    // (its send time + ttl) falls no later than ttl after the pause: the holder hears of the
    // loss before the server can give the key to anyone else (allowing for one retry period
    // and the delivery to this thread).
    assert.ok(after <= ttl + 400, `reported ${after.toFixed(0)} ms after the partition`)
  } finally {
    await locks.close()
    await proxy.close()
  }
})

test('a lock that another owner took over is reported lost as not-owned by the next heartbeat', async (t) => {
  if (!(await needRedis(t))) return
  const locks = await connect(REDIS_URL)
  try {
    const k = prefix('stolen') + 'k'
    const lock = await locks.acquire(k, { ttl: 5000, autoExtend: true, extendEvery: 100 })
    const lost = lostReason(lock, 5000)
    await redisRaw().set(k, 'someone-else', 'PX', 5000)
    const reason = await lost
    assert.equal(reason.reason, 'not-owned')
    // The new owner's key is untouched by the loser.
    assert.equal(await redisRaw().get(k), 'someone-else')
    assert.equal(await lock.release(), false)
    assert.equal(await redisRaw().get(k), 'someone-else')
  } finally {
    await locks.close()
  }
})
