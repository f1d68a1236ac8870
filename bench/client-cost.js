'use strict'
// What each library's client spends on an acquire+release pair, in instructions: a number
// that does not move with the load on this shared box, where CPU seconds do. Each library
// runs scenario 2's loop (100 pairs in flight on distinct keys, as bench/worker.js drives it
// through bench/adapters.js) against a private redis-server, in a node process under
// valgrind's callgrind, twice: with FEW and with MANY pairs. The difference of the client's
// instruction counts over the difference of the pairs is its cost per pair, with the
// process's start, the connection and V8's compiling of the hot code cancelled out (FEW is
// large enough for the optimizing compiler to have finished).
//   node bench/client-cost.js                  # deadbolt, deadbolt-unfenced, redislock, redis-semaphore
//   BENCH_ONLY=deadbolt,redislock node bench/client-cost.js
// BENCH_RUNS (1) interleaved rounds. Counts user-space instructions only: system calls
// (which ioredis and node_redis make more of than deadbolt's batched writes) are not in
// them; bench/RESULTS.md's CPU seconds are. Needs valgrind; writes bench/RESULTS-client-cost.md.
// Loads the addon the other benches do (NAPI_RS_NATIVE_LIBRARY_PATH selects another build).

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { spawn, spawnSync, execFileSync } = require('node:child_process')

const DEFAULT_LIBS = ['deadbolt', 'deadbolt-unfenced', 'redislock', 'redis-semaphore']
const IN_FLIGHT = 100

// Exits when done: the private redis-server, a child process, would keep the event loop
// alive (it is killed on exit).
const done = (p) => p.then(() => process.exit(0), (err) => {
  console.error(err)
  process.exit(1)
})
if (process.argv[2] === '--child') done(child(...process.argv.slice(3)))
else done(main())

/** One library, `pairs` pairs, IN_FLIGHT at a time; exits when done. */
async function child(lib, url, pairs) {
  const { LIBS } = require('./adapters')
  const { parallel } = require('./util')
  const adapter = LIBS[lib].make({ redis: url })
  await adapter.open()
  const lockers = []
  for (let w = 0; w < IN_FLIGHT; w++) lockers.push(await adapter.newLocker())
  let left = Number(pairs)
  await parallel(IN_FLIGHT, async (w) => {
    let j = 0
    while (left > 0) {
      left--
      await lockers[w].acquire(`dbcost:${w}:${j++ % 500}`)
      await lockers[w].release()
    }
  })
  await adapter.close()
}

async function main() {
  const { LIBS } = require('./adapters')
  const { config } = require('./config')
  const { fmt, sleep, median, spread, which, rotated } = require('./util')
  const cfg = config({ BENCH_RUNS: '1', ...process.env })
  const FEW = Number(process.env.BENCH_CLIENT_FEW || 11000)
  const MANY = Number(process.env.BENCH_CLIENT_MANY || 41000)
  const libs = cfg.only ? cfg.only.filter((l) => LIBS[l]?.backend === 'redis') : DEFAULT_LIBS
  const server = which('redis-server', ['/usr/sbin', '/usr/local/bin'])
  if (!which('valgrind') || !server) {
    console.error('bench/client-cost.js needs valgrind and redis-server (Debian: apt-get install valgrind redis-server)')
    process.exit(1)
  }
  const port = 20000 + Math.floor(Math.random() * 20000)
  const redis = spawn(server, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
  const kill = () => redis.kill('SIGKILL')
  process.on('exit', kill)
  for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(130))
  const ping = () => spawnSync('redis-cli', ['-p', String(port), 'PING'], { encoding: 'utf8' }).stdout.trim() === 'PONG'
  for (let i = 0; i < 50 && !ping(); i++) await sleep(100)
  const url = `redis://127.0.0.1:${port}`
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dbclient-'))
  /** Instructions a client process executed for `pairs` pairs. */
  const count = (lib, pairs) => {
    const out = path.join(dir, `${lib}.${pairs}.out`)
    const r = spawnSync('valgrind', ['--tool=callgrind', `--callgrind-out-file=${out}`, process.execPath, __filename, '--child', lib, url, String(pairs)], { encoding: 'utf8', timeout: 1_800_000 })
    const m = /Collected : (\d+)/.exec(r.stderr || '')
    if (r.status !== 0 || !m) throw new Error(`${lib}: ${(r.stderr || '').trim().split('\n').slice(-3).join(' | ')}`)
    fs.rmSync(out, { force: true })
    return Number(m[1])
  }
  const perPair = {}
  try {
    for (let run = 0; run < cfg.runs; run++) {
      for (const lib of rotated(libs, run)) {
        const x = (count(lib, MANY) - count(lib, FEW)) / (MANY - FEW)
        ;(perPair[lib] ||= []).push(x)
        process.stdout.write(`[run ${run + 1}/${cfg.runs}] ${LIBS[lib].label}: ${fmt(x)} instructions per pair\n`)
      }
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
  const rows = libs.map((lib) => ({ lib, perPair: median(perPair[lib]), runs: perPair[lib] }))
  const override = process.env.NAPI_RS_NATIVE_LIBRARY_PATH
  const addon = override ? `the addon at ${override} (NAPI_RS_NATIVE_LIBRARY_PATH)` : `${fs.readdirSync(path.join(__dirname, '..')).find((f) => f.startsWith('deadbolt.') && f.endsWith('.node')) ?? 'no addon'} in the checkout`
  const base = rows.find((r) => r.lib === 'redislock')?.perPair
  const md = [
    '# Client instructions per acquire+release pair — `node bench/client-cost.js`',
    '',
    `Generated on ${new Date().toISOString()}; median (min–max) of ${cfg.runs} interleaved run(s). Scenario 2's loop (${IN_FLIGHT} pairs in flight on distinct keys, driven through bench/adapters.js) against a private redis-server, the client's node process under callgrind: instructions for ${MANY} pairs minus those for ${FEW}, divided by ${MANY - FEW}. User-space instructions of the whole client process (JavaScript, V8, the addon, libc), not system calls. Node ${process.version}; deadbolt: ${addon}.`,
    '',
    '| library | client instructions per pair | ÷ redislock |',
    '| --- | --- | --- |',
    ...rows.map((r) => `| ${LIBS[r.lib].label} | ${spread(r.runs)} | ${base ? `${fmt(r.perPair / base, 2)}×` : '–'} |`),
    '',
  ]
  const file = cfg.only ? 'RESULTS-client-cost-partial.md' : 'RESULTS-client-cost.md'
  fs.writeFileSync(path.join(__dirname, file), md.join('\n'))
  process.stdout.write(`wrote bench/${file}\n`)
}
