'use strict'
// A worker_threads body for the terminate scenario: its own client; takes `key` and keeps it
// with a heartbeat ("hold"), or queues for `key` held elsewhere ("wait"). It tells the parent
// its owner prefix (from a lock's public `owner`) so the store can be watched for it.
const { parentPort, workerData } = require('node:worker_threads')
const { connect } = require('..')

async function main() {
  const { url, key, mode, ttl, opts } = workerData
  const locks = await connect(url, opts)
  // Learn this client's owner prefix from a throwaway lock on a key of its own.
  const probe = await locks.acquire(`${key}:probe`, { ttl: 1000 })
  const ownerPrefix = probe.owner.slice(0, probe.owner.lastIndexOf('.') + 1)
  await probe.release()
  if (mode === 'hold') {
    const lock = await locks.acquire(key, { ttl, autoExtend: true, extendEvery: Math.floor(ttl / 4) })
    parentPort.postMessage({ ready: true, ownerPrefix, owner: lock.owner, token: String(lock.fencingToken) })
  } else {
    locks.acquire(key, { ttl, wait: 60000, autoExtend: true, retryDelay: 20 }).then(
      (lock) => parentPort.postMessage({ granted: true, owner: lock.owner }), () => {})
    for (let i = 0; i < 400 && locks.stats().waiting === 0; i++) await new Promise((r) => setTimeout(r, 5))
    parentPort.postMessage({ ready: true, ownerPrefix, waiting: locks.stats().waiting })
  }
  setInterval(() => {}, 1000)
}
main().catch((err) => { parentPort.postMessage({ ready: true, error: String(err.message) }) })
