'use strict'
// The faces against their originals in ONE process, on one ioredis client, in interleaved
// rounds (the order alternating), so that a busy shared machine slows both alike:
//   node bench/faces.js                      # redlock5 face5 sem semface, against BENCH_REDIS_URL
//   ROUNDS=8 MS=1000 SEQ=1 node bench/faces.js redlock5 face5
// Each round runs W (100) workers looping acquire+release on keys of their own (500 each) for
// MS ms; it reports the median pairs/s and client CPU per pair (process.cpuUsage) over ROUNDS
// rounds, and with SEQ=1 the median of each round's sequential p50 (2 000 pairs). Settings as
// in `npm run bench`: ttl 10 s, retry 10 ms (redlock ±5 ms jitter), unlimited retries.
// Used for bench/RESULTS-faces.md; `npm run bench` (separate processes) is the reference.

const path = require('node:path')
const Redis = require('ioredis')

const ROOT = path.join(__dirname, '..')
const URL = process.env.BENCH_REDIS_URL || 'redis://127.0.0.1:6379'
const ROUNDS = Number(process.env.ROUNDS || 6)
const MS = Number(process.env.MS || 1500)
const W = Number(process.env.W || 100)

const redlockLike = (Redlock) => (c) => {
  const rl = new Redlock([c], { retryCount: -1, retryDelay: 10, retryJitter: 5, driftFactor: 0.01 })
  rl.on('error', () => {})
  return { acquire: (k) => rl.acquire([k], 10_000), release: (l) => l.release() }
}
const mutexLike = ({ Mutex }) => (c) => ({
  async acquire(k) {
    const m = new Mutex(c, k, { lockTimeout: 10_000, acquireTimeout: Infinity, retryInterval: 10, refreshInterval: 0, onLockLost: () => {} })
    await m.acquire()
    return m
  },
  release: (m) => m.release(),
})
const LIBS = {
  redlock5: () => redlockLike(require('redlock5').default),
  face5: () => redlockLike(require(path.join(ROOT, 'redlock')).default),
  sem: () => mutexLike(require('redis-semaphore')),
  semface: () => mutexLike(require(path.join(ROOT, 'redis-semaphore'))),
}

async function inFlight(name, lib) {
  let stop = false
  let pairs = 0
  const t0 = process.hrtime.bigint()
  const c0 = process.cpuUsage()
  setTimeout(() => { stop = true }, MS)
  await Promise.all(Array.from({ length: W }, async (_, w) => {
    let i = 0
    while (!stop) {
      const l = await lib.acquire(`dbfaces:${name}:${w}:${i++ % 500}`)
      await lib.release(l)
      pairs++
    }
  }))
  const c = process.cpuUsage(c0)
  return { pps: pairs / (Number(process.hrtime.bigint() - t0) / 1e9), cpu: (c.user + c.system) / pairs }
}

async function sequential(name, lib, n = 2000) {
  const t = []
  for (let i = 0; i < n; i++) {
    const s = process.hrtime.bigint()
    await lib.release(await lib.acquire(`dbfaces:${name}:s:${i}`))
    t.push(Number(process.hrtime.bigint() - s) / 1000)
  }
  return median(t)
}

function median(a) {
  const s = [...a].sort((x, y) => x - y)
  return s[s.length >> 1]
}

async function main() {
  const which = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(LIBS)
  const c = new Redis(URL)
  await c.ping()
  const libs = Object.fromEntries(which.map((w) => [w, LIBS[w]()(c)]))
  for (const w of which) await inFlight(w, libs[w]) // warm-up, scripts loaded
  const res = Object.fromEntries(which.map((w) => [w, { pps: [], cpu: [], seq: [] }]))
  for (let r = 0; r < ROUNDS; r++) {
    for (const w of r % 2 ? [...which].reverse() : which) {
      const x = await inFlight(w, libs[w])
      res[w].pps.push(x.pps)
      res[w].cpu.push(x.cpu)
      if (process.env.SEQ) res[w].seq.push(await sequential(w, libs[w]))
    }
  }
  console.log(`| library | pairs/s (100 in flight) | client CPU µs/pair |${process.env.SEQ ? ' sequential p50 µs |' : ''}`)
  console.log(`|---|---|---|${process.env.SEQ ? '---|' : ''}`)
  for (const w of which) {
    const r = res[w]
    const range = (a, d = 0) => `${median(a).toFixed(d)} (${Math.min(...a).toFixed(d)}–${Math.max(...a).toFixed(d)})`
    console.log(`| ${w} | ${range(r.pps)} | ${range(r.cpu, 1)} |${process.env.SEQ ? ` ${range(r.seq)} |` : ''}`)
  }
  // Every lock was released: no key is left behind.
  c.disconnect()
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
