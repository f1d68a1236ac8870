'use strict'
// What the argument checks cost on the acquire path. Run it before and after a change to the
// checks (`node bench/validation.js`); nothing here talks to a server (memory:// store).
//  1. checkKey alone, on short ASCII keys and on keys with non-Latin-1 characters;
//  2. the synchronous part of acquire() (checks, option resolution, queueing), per call;
//  3. sequential acquire+release pairs on memory://, end to end.

const { performance } = require('node:perf_hooks')
const { connect } = require('..')
const v = require('../lib/validate')

const ROUNDS = Number(process.env.ROUNDS || 5)

function median(xs) {
  const s = [...xs].sort((a, b) => a - b)
  return s[s.length >> 1]
}

function checkKeyNs(keys) {
  const reps = 2000
  let n = 0
  for (let r = 0; r < 200; r++) for (const k of keys) n += v.checkKey(k).length
  const t = process.hrtime.bigint()
  for (let r = 0; r < reps; r++) for (const k of keys) n += v.checkKey(k).length
  return { ns: Number(process.hrtime.bigint() - t) / (reps * keys.length), n }
}

async function syncAcquireNs(locks, keys, options) {
  // Calls acquire() for 100 keys at a time without awaiting in between: what is timed is the
  // work done on the JS thread before the native submit (which runs in a microtask
  // afterwards). The fastest of the batches is kept: GC pauses only ever add.
  let best = Infinity
  for (let i = 0; i < keys.length; i += 100) {
    const batch = keys.slice(i, i + 100)
    const t = process.hrtime.bigint()
    const ps = batch.map((k) => locks.acquire(k, options))
    best = Math.min(best, Number(process.hrtime.bigint() - t) / batch.length)
    const held = await Promise.all(ps)
    await Promise.all(held.map((l) => l.release()))
  }
  return best
}

async function pairsUs(locks, key, options, n) {
  const t = performance.now()
  for (let i = 0; i < n; i++) {
    const l = await locks.acquire(key, options)
    await l.release()
  }
  return ((performance.now() - t) * 1000) / n
}

async function main() {
  const ascii = Array.from({ length: 2000 }, (_, i) => `orders:${i}:${Math.random().toString(36).slice(2)}`)
  const wide = ascii.map((k) => `${k}:日本`)
  const locks = await connect(`memory://bench-validation-${process.pid}`)
  const options = { ttl: 10_000, wait: 1_000, retryDelay: 10 }
  const rows = { 'checkKey, ASCII key (ns)': [], 'checkKey, non-Latin-1 key (ns)': [], 'acquire() sync part, no options (ns, best batch)': [], 'acquire() sync part, with options (ns, best batch)': [], 'acquire+release pair, memory:// (µs)': [] }
  for (let r = 0; r < ROUNDS; r++) {
    rows['checkKey, ASCII key (ns)'].push(checkKeyNs(ascii).ns)
    rows['checkKey, non-Latin-1 key (ns)'].push(checkKeyNs(wide).ns)
    rows['acquire() sync part, no options (ns, best batch)'].push(await syncAcquireNs(locks, ascii, undefined))
    rows['acquire() sync part, with options (ns, best batch)'].push(await syncAcquireNs(locks, ascii, options))
    rows['acquire+release pair, memory:// (µs)'].push(await pairsUs(locks, 'bench:pair', options, 2000))
  }
  await locks.close()
  for (const [name, xs] of Object.entries(rows)) console.log(`${name.padEnd(50)} median ${median(xs).toFixed(1).padStart(8)}   (${xs.map((x) => x.toFixed(1)).join(', ')})`)
}

main().catch((err) => { console.error(err); process.exit(1) })
