'use strict'
// `node bench/etcd.js`: deadbolt's etcd store side by side with the `etcd3` package's `Lock` on
// one throwaway etcd member (__test__/fixtures/etcd.js), in one run, libraries interleaved over
// BENCH_RUNS rounds; every figure is the median over the rounds, and the ratio is against
// etcd3 measured in the same run. Scenarios:
//   seq       sequential acquire+release pairs on one key: p50 per pair
//   inflight  100 loops at once, each on its own key: pairs per second
//   handoff   10 workers on one key, each holding ~1 ms: acquisitions per second, and
//             fairness (fewest ÷ most acquisitions of one worker)
// etcd3's Lock does not wait: a refused acquire is tried again after 10 ms (deadbolt waits with
// its watch, and retryDelay 10 ms as a fallback). Writes bench/RESULTS-etcd.md.

const fs = require('node:fs')
const path = require('node:path')
const { median, fmt, sleep } = require('./util')
const { startEtcd } = require('../__test__/fixtures/etcd')

const RUNS = Number(process.env.BENCH_RUNS || 2)
const SECONDS = Number(process.env.BENCH_SECONDS || 3)
const SEQ_PAIRS = 200
const IN_FLIGHT = 100
const WORKERS = 10
const TTL_S = 10

async function deadboltLib(url) {
  const { connect } = require('..')
  const client = await connect(url)
  return {
    name: 'deadbolt',
    async pair(key) { const l = await client.acquire(key, { ttl: TTL_S * 1000 }); await l.release() },
    async hold(key, fn) { const l = await client.acquire(key, { ttl: TTL_S * 1000, retryDelay: 10, wait: 60000 }); try { await fn() } finally { await l.release() } },
    close: () => client.close(),
  }
}

async function etcd3Lib(port) {
  const { Etcd3 } = require('etcd3')
  const client = new Etcd3({ hosts: `127.0.0.1:${port}` })
  return {
    name: 'etcd3',
    async pair(key) { const l = client.lock(key).ttl(TTL_S); await l.acquire(); await l.release() },
    async hold(key, fn) {
      for (;;) {
        const l = client.lock(key).ttl(TTL_S)
        try { await l.acquire() } catch { await sleep(10); continue }
        try { return await fn() } finally { await l.release() }
      }
    },
    close: () => client.close(),
  }
}

async function seq(lib, key) {
  const times = []
  for (let i = 0; i < SEQ_PAIRS; i++) {
    const t = process.hrtime.bigint()
    await lib.pair(key)
    times.push(Number(process.hrtime.bigint() - t) / 1000)
  }
  return median(times)
}

async function inflight(lib, key) {
  let pairs = 0
  const end = Date.now() + SECONDS * 1000
  await Promise.all(Array.from({ length: IN_FLIGHT }, async (_, i) => {
    while (Date.now() < end) { await lib.pair(`${key}:${i}`); pairs++ }
  }))
  return pairs / SECONDS
}

async function handoff(lib, key) {
  const counts = new Array(WORKERS).fill(0)
  const end = Date.now() + SECONDS * 1000
  await Promise.all(counts.map(async (_, i) => {
    while (Date.now() < end) { await lib.hold(key, () => sleep(1)); counts[i]++ }
  }))
  const total = counts.reduce((a, b) => a + b, 0)
  return { rate: total / SECONDS, fairness: Math.min(...counts) / Math.max(...counts) }
}

async function main() {
  const cluster = await startEtcd()
  const url = cluster.url()
  const port = cluster.members[0].clientPort
  const results = { deadbolt: { seq: [], inflight: [], handoff: [], fairness: [] }, etcd3: { seq: [], inflight: [], handoff: [], fairness: [] } }
  try {
    for (let run = 0; run < RUNS; run++) {
      const order = run % 2 === 0 ? ['deadbolt', 'etcd3'] : ['etcd3', 'deadbolt']
      for (const name of order) {
        const lib = name === 'deadbolt' ? await deadboltLib(url) : await etcd3Lib(port)
        const key = `bench:${name}:${run}`
        results[name].seq.push(await seq(lib, `${key}:seq`))
        results[name].inflight.push(await inflight(lib, `${key}:fl`))
        const h = await handoff(lib, `${key}:h`)
        results[name].handoff.push(h.rate)
        results[name].fairness.push(h.fairness)
        await lib.close()
        process.stderr.write(`run ${run + 1}/${RUNS} ${name} done\n`)
      }
    }
  } finally {
    await cluster.stop()
  }
  const m = (n, s) => median(results[n][s])
  const rows = [
    ['sequential pair p50 (µs, lower is better)', 'seq', true],
    ['100 in flight (pairs/s)', 'inflight', false],
    ['contended handoff, 10 workers (acquisitions/s)', 'handoff', false],
    ['fairness (fewest ÷ most per worker)', 'fairness', false],
  ]
  const lines = [
    '# deadbolt on etcd against etcd3 (npm) `Lock`',
    '',
    `One etcd 3.4 member (throwaway, loopback), ${RUNS} interleaved runs of ${SECONDS} s per scenario, medians.`,
    'Ratio: deadbolt ÷ etcd3 (for the p50, etcd3 ÷ deadbolt: above 1 means deadbolt is better everywhere).',
    '',
    '| scenario | deadbolt | etcd3 | ratio |',
    '|---|---|---|---|',
    ...rows.map(([label, s, lower]) => {
      const d = m('deadbolt', s)
      const e = m('etcd3', s)
      return `| ${label} | ${fmt(d)} | ${fmt(e)} | ${fmt(lower ? e / d : d / e)}x |`
    }),
    '',
  ]
  fs.writeFileSync(path.join(__dirname, 'RESULTS-etcd.md'), lines.join('\n'))
  process.stdout.write(lines.join('\n'))
}

main().catch((e) => { process.stderr.write(`${e.stack}\n`); process.exit(1) })
