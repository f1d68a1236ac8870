#!/usr/bin/env node
// Run by scripts/release-check.sh with NAPI_RS_NATIVE_LIBRARY_PATH naming one built binary
// (natively, or under qemu with another architecture's node): loads deadbolt through its
// public entry point and takes and releases a lock on the in-process store (the runtime, the
// timers), on a SQLite file (the bundled C library zig compiled) and, when REDIS_URL is set,
// on Redis (sockets, the Lua scripts). Prints one line per store; exits non-zero on failure.
'use strict'
// Debian 12's arm64 nodejs, the one qemu runs, is Node 18, and deadbolt's JavaScript needs Node
// 20 (`engines`) for String.prototype.isWellFormed alone. What this checks is the native
// binary, not the JavaScript (npm test runs that on Node 20): on an older node, that one
// method is supplied here, with its specified meaning (no lone UTF-16 surrogate).
if (typeof String.prototype.isWellFormed !== 'function') {
  console.log(`release-check: node ${process.version} lacks String.prototype.isWellFormed (Node 20); supplied for this check`)
  Object.defineProperty(String.prototype, 'isWellFormed', {
    configurable: true,
    writable: true,
    value: function isWellFormed() {
      return !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(String(this))
    },
  })
}
const fs = require('fs')
const os = require('os')
const path = require('path')
const { connect } = require('..')

async function lockOnce(url) {
  const locks = await connect(url, { connectTimeout: 5000 })
  try {
    const key = `release-check:${process.pid}:${Date.now()}`
    const lock = await locks.acquire(key, { ttl: 10_000 })
    const info = await locks.inspect(key)
    if (info === null || info.owner !== lock.owner) throw new Error(`${url}: inspect does not show the holder`)
    await lock.release()
    if ((await locks.inspect(key)) !== null) throw new Error(`${url}: the lock is still held after release`)
    return lock.fencingToken
  } finally {
    await locks.close()
  }
}

async function main() {
  const binary = process.env.NAPI_RS_NATIVE_LIBRARY_PATH
  if (!binary) throw new Error('NAPI_RS_NATIVE_LIBRARY_PATH must name the binary to check')
  const where = `${path.basename(binary)} on node ${process.version} ${process.platform}-${process.arch}`
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-release-check-'))
  try {
    const urls = ['memory://', `sqlite://${path.join(dir, 'locks.db')}`]
    if (process.env.REDIS_URL) urls.push(process.env.REDIS_URL)
    for (const url of urls) {
      const token = await lockOnce(url)
      console.log(`ok: ${where}: ${url.split(':')[0]} lock taken and released (fencing token ${token})`)
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

main().catch((err) => {
  console.error(`release-check: ${err.stack || err}`)
  process.exit(1)
})
