'use strict'
// Module load: what `require()` of each library costs a process that starts. Each sample is a
// fresh `node` child that requires the library (with the client it needs) and reports how long
// the require() took and the CPU it used; the parent times the whole child (node's own start
// included, the same for everyone). Rounds are interleaved, the order rotating each round.
//   node bench/load.js              # standalone, prints the table
// bench/run.js calls measureLoad() at the start of a run and writes the table to RESULTS.md.

const path = require('node:path')
const { spawnSync } = require('node:child_process')
const { median, spread, fmt, rotated } = require('./util')
const { config } = require('./config')

const ROOT = path.join(__dirname, '..')

/** What a user of each library loads: the library and the client it runs on. */
const LOADS = [
  { id: 'deadbolt', label: 'deadbolt (addon included)', modules: [ROOT] },
  { id: 'ioredis', label: 'ioredis 5', modules: ['ioredis'] },
  { id: 'redislock', label: 'redislock 1.3 + redis@3', modules: ['redislock', 'redis3'] },
  { id: 'redlock', label: 'redlock 4 + ioredis', modules: ['redlock', 'ioredis'] },
  { id: 'redis-semaphore', label: 'redis-semaphore 5 + ioredis', modules: ['redis-semaphore', 'ioredis'] },
  { id: 'node', label: 'nothing (node alone)', modules: [] },
]

// The child: time the require() calls alone, then report; nothing else runs before them.
const CHILD = `
const t0 = process.hrtime.bigint(), c0 = process.cpuUsage()
for (const m of JSON.parse(process.argv[1])) require(m)
const t1 = process.hrtime.bigint(), c = process.cpuUsage(c0)
process.stdout.write(JSON.stringify({ requireMs: Number(t1 - t0) / 1e6, cpuMs: (c.user + c.system) / 1000 }))
`

function sample(load) {
  const t0 = process.hrtime.bigint()
  const r = spawnSync(process.execPath, ['-e', CHILD, JSON.stringify(load.modules)], { cwd: ROOT, encoding: 'utf8' })
  const wallMs = Number(process.hrtime.bigint() - t0) / 1e6
  if (r.status !== 0) throw new Error(`loading ${load.label} failed: ${(r.stderr || '').trim().split('\n').pop()}`)
  return { ...JSON.parse(r.stdout), wallMs }
}

/** Interleaved rounds of every load; returns { [id]: [{requireMs, cpuMs, wallMs}] }. */
function measureLoad(rounds = 15, loads = LOADS) {
  const samples = {}
  // One unmeasured round first: the page cache holds every file afterwards, for everyone.
  for (const load of loads) sample(load)
  for (let round = 0; round < rounds; round++) {
    for (const load of rotated(loads, round)) (samples[load.id] ||= []).push(sample(load))
  }
  return samples
}

/** The Markdown table of measureLoad()'s samples, with each library ÷ ioredis. */
function loadTable(samples, loads = LOADS) {
  const rows = [
    ['library', 'require() ms', 'require() CPU ms', 'whole `node -e` ms', 'require() ÷ ioredis'],
    ['---', '---', '---', '---', '---'],
  ]
  const base = median((samples.ioredis || []).map((s) => s.requireMs))
  for (const load of loads) {
    const xs = samples[load.id]
    if (!xs) continue
    const req = xs.map((s) => s.requireMs)
    const ratio = load.modules.length && Number.isFinite(base) ? `${fmt(median(req) / base, 2)}×` : '–'
    rows.push([load.label, spread(req), spread(xs.map((s) => s.cpuMs)), spread(xs.map((s) => s.wallMs)), ratio])
  }
  return rows.map((r) => `| ${r.join(' | ')} |`).join('\n')
}

module.exports = { measureLoad, loadTable, LOADS }

if (require.main === module) {
  const rounds = config(process.env).loadRounds || 15
  process.stdout.write(`Module load, ${rounds} interleaved rounds (median (min–max)):\n\n${loadTable(measureLoad(rounds))}\n`)
}
