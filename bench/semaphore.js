'use strict'
// `node bench/semaphore.js`: deadbolt's semaphores side by side with redis-semaphore's on one
// Redis server. Two scenarios, 20 workers each holding for ~1 ms, for BENCH_SECONDS:
//   sem    a semaphore of 5 permits, one permit per acquisition (redis-semaphore `Semaphore`)
//   multi  a semaphore of 5 permits, two per acquisition (redis-semaphore `MultiSemaphore`)
// Each cell is a fresh child process (this file with `--cell`); runs are interleaved
// round-robin over the libraries, and every figure is the median (min–max) over BENCH_RUNS.
// Reported: acquisitions per second, fairness (fewest ÷ most acquisitions of one worker),
// Redis commands and Redis CPU per acquisition (INFO deltas over the measured window, this
// bench's own INFO calls excluded), client CPU per acquisition, and the most permits seen held
// at once (must never pass the limit). Starts its own throwaway redis-server on a free port
// and stops it; writes bench/RESULTS-semaphore.md.

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const net = require('node:net')
const { spawn } = require('node:child_process')
const { spread, median, fmt, sleep, cpuMicros } = require('./util')

const RUNS = Number(process.env.BENCH_RUNS || 3)
const SECONDS = Number(process.env.BENCH_SECONDS || 3)
const WORKERS = 20
const LIMIT = 5
const HOLD_MS = 1
const RETRY_MS = 10
const TTL = 10_000
const SCENARIOS = { sem: 1, multi: 2 }
const LIBS = ['deadbolt', 'redis-semaphore']
const LABELS = { deadbolt: 'deadbolt (native, wake-ups)', 'redis-semaphore': 'redis-semaphore 5.8 (ioredis, polling)' }

/** One library's acquire/release over one semaphore, `permits` per acquisition. */
async function makeLib(lib, url, key, permits) {
  if (lib === 'deadbolt') {
    const { connect } = require('..')
    const locks = await connect(url)
    const sem = locks.semaphore(key, { limit: LIMIT })
    return {
      acquire: () => sem.acquire({ permits, ttl: TTL, wait: Infinity, retryDelay: RETRY_MS }),
      release: (p) => p.release(),
      close: () => locks.close(),
    }
  }
  const Redis = require('ioredis')
  const { Semaphore, MultiSemaphore } = require('redis-semaphore')
  const client = new Redis(url)
  const opts = { lockTimeout: TTL, acquireTimeout: 600_000, retryInterval: RETRY_MS, refreshInterval: 0, onLockLost: () => {} }
  return {
    acquire: async () => {
      const s = permits === 1 ? new Semaphore(client, key, LIMIT, opts) : new MultiSemaphore(client, key, LIMIT, permits, opts)
      await s.acquire()
      return s
    },
    release: (s) => s.release(),
    close: async () => client.quit(),
  }
}

/** Parses INFO: total commands, and Redis CPU in µs. */
function parseInfo(text) {
  let calls = 0
  let cpu = 0
  for (const line of text.split('\r\n')) {
    const m = /^cmdstat_[^:]+:calls=(\d+)/.exec(line)
    if (m) calls += Number(m[1])
    const c = /^used_cpu_(sys|user):([\d.]+)/.exec(line)
    if (c) cpu += Number(c[2]) * 1e6
  }
  return { calls, cpu }
}

/** A cell: runs in its own process, prints one JSON line. */
async function cell(lib, scenario, url) {
  const Redis = require('ioredis')
  const probe = new Redis(url)
  const permits = SCENARIOS[scenario]
  const key = `dbbench:sem:${lib}:${scenario}:${process.pid}`
  const impl = await makeLib(lib, url, key, permits)
  const counts = new Array(WORKERS).fill(0)
  let held = 0
  let maxHeld = 0
  let measuring = false
  let stop = false
  const loop = async (i) => {
    while (!stop) {
      const p = await impl.acquire()
      held += permits
      if (held > maxHeld) maxHeld = held
      await sleep(HOLD_MS)
      held -= permits
      if (measuring) counts[i]++
      await impl.release(p)
    }
  }
  const loops = Array.from({ length: WORKERS }, (_, i) => loop(i))
  await sleep(500)
  const before = parseInfo(await probe.info('commandstats', 'cpu'))
  const cpu0 = cpuMicros()
  const t0 = process.hrtime.bigint()
  measuring = true
  await sleep(SECONDS * 1000)
  measuring = false
  const t1 = process.hrtime.bigint()
  const cpu1 = cpuMicros()
  const after = parseInfo(await probe.info('commandstats', 'cpu'))
  stop = true
  await Promise.all(loops)
  await impl.close()
  await probe.quit()
  const n = counts.reduce((a, b) => a + b, 0)
  const secs = Number(t1 - t0) / 1e9
  return {
    perSec: n / secs,
    fairness: Math.min(...counts) / Math.max(...counts),
    // One INFO call of ours lands in the window.
    cmdsPerAcq: (after.calls - before.calls - 1) / n,
    serverCpuPerAcq: (after.cpu - before.cpu) / n,
    clientCpuPerAcq: (cpu1 - cpu0) / n,
    maxHeld,
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer()
    srv.once('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address()
      srv.close(() => resolve(port))
    })
  })
}

function answers(port) {
  return new Promise((resolve) => {
    const s = net.connect({ port, host: '127.0.0.1' })
    s.once('connect', () => { s.destroy(); resolve(true) })
    s.once('error', () => resolve(false))
  })
}

function runCell(lib, scenario, url) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [__filename, '--cell', lib, scenario, url], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.on('data', (d) => { out += d })
    const killer = setTimeout(() => child.kill('SIGKILL'), 120_000)
    child.on('exit', (code) => {
      clearTimeout(killer)
      const line = out.split('\n').find((l) => l.startsWith('RESULT '))
      resolve(line ? JSON.parse(line.slice(7)) : { error: `exited ${code}` })
    })
  })
}

const COLUMNS = [
  ['acquisitions/s', (r) => r.perSec],
  ['fairness min/max', (r) => r.fairness],
  ['Redis cmds/acq', (r) => r.cmdsPerAcq],
  ['Redis CPU µs/acq', (r) => r.serverCpuPerAcq],
  ['client CPU µs/acq', (r) => r.clientCpuPerAcq],
  ['most permits held', (r) => r.maxHeld],
]

async function main() {
  const port = await freePort()
  const server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
  try {
    for (let i = 0; i < 400 && !(await answers(port)); i++) await sleep(25)
    const url = `redis://127.0.0.1:${port}`
    const results = {}
    for (let run = 0; run < RUNS; run++) {
      for (const s of Object.keys(SCENARIOS)) {
        const order = run % 2 ? LIBS.slice().reverse() : LIBS
        for (const lib of order) {
          const r = await runCell(lib, s, url)
          ;(results[`${lib}:${s}`] ??= []).push(r)
          process.stderr.write(`run ${run + 1} ${s} ${lib}: ${r.error ?? `${fmt(r.perSec)}/s`}\n`)
        }
      }
    }
    const md = [
      '# Semaphores: deadbolt and redis-semaphore',
      '',
      `${new Date().toISOString()}, ${os.cpus().length} cores, load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}; ${RUNS} interleaved runs per cell, median (min–max). \`node bench/semaphore.js\`; one private redis-server. ${WORKERS} workers, limit ${LIMIT}, hold ${HOLD_MS} ms, ${SECONDS} s per cell after 0.5 s of warm-up; lease ${TTL} ms, ${RETRY_MS} ms between attempts (redis-semaphore \`retryInterval\`; deadbolt \`retryDelay\`, woken by releases as well).`,
      '',
    ]
    const titles = { sem: `one permit per acquisition (redis-semaphore \`Semaphore\`)`, multi: `two permits per acquisition (redis-semaphore \`MultiSemaphore\`)` }
    for (const s of Object.keys(SCENARIOS)) {
      md.push(`## ${titles[s]}`, '', `| library | ${COLUMNS.map(([h]) => h).join(' | ')} |`, `|---|${COLUMNS.map(() => '---|').join('')}`)
      for (const lib of LIBS) {
        const runs = (results[`${lib}:${s}`] ?? []).filter((r) => !r.error)
        md.push(`| ${LABELS[lib]} | ${runs.length ? COLUMNS.map(([, f]) => spread(runs.map(f))).join(' | ') : 'failed'} |`)
      }
      md.push('')
    }
    md.push('## Ratios (medians, deadbolt ÷ redis-semaphore for throughput, redis-semaphore ÷ deadbolt for costs)', '')
    const m = (lib, s, f) => median((results[`${lib}:${s}`] ?? []).filter((r) => !r.error).map(f))
    for (const s of Object.keys(SCENARIOS)) {
      const thr = m('deadbolt', s, (r) => r.perSec) / m('redis-semaphore', s, (r) => r.perSec)
      const cmds = m('redis-semaphore', s, (r) => r.cmdsPerAcq) / m('deadbolt', s, (r) => r.cmdsPerAcq)
      const cpu = m('redis-semaphore', s, (r) => r.serverCpuPerAcq) / m('deadbolt', s, (r) => r.serverCpuPerAcq)
      md.push(`- ${s}: throughput ${fmt(thr)}×, Redis commands ${fmt(cmds)}× fewer, Redis CPU ${fmt(cpu)}× less per acquisition`)
    }
    md.push('')
    const out = process.env.BENCH_RESULTS || path.join(__dirname, 'RESULTS-semaphore.md')
    fs.writeFileSync(out, md.join('\n'))
    process.stdout.write(md.join('\n'))
  } finally {
    server.kill('SIGKILL')
  }
}

if (process.argv[2] === '--cell') {
  cell(process.argv[3], process.argv[4], process.argv[5])
    .then((r) => { process.stdout.write(`RESULT ${JSON.stringify(r)}\n`) })
    .catch((err) => { console.error(err); process.exitCode = 1 })
} else {
  main().catch((err) => {
    console.error(err)
    process.exitCode = 1
  })
}
