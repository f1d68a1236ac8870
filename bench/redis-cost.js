'use strict'
// What each library's acquire+release costs Redis, in instructions: a number that does not
// move with the load on this shared box, where Redis CPU seconds do. Each library runs
// scenario 1 (sequential pairs on distinct keys, bench/worker.js) against a private
// redis-server under valgrind's callgrind, twice: with FEW and with MANY pairs. The difference
// of the server's instruction counts over the difference of the pairs is its cost per pair,
// with the connection, the script loads and the warm-up cancelled out; an unmeasured run
// before both leaves the server as each of them finds it (scripts compiled once).
//   node bench/redis-cost.js                  # every Redis library of scenario 1
//   BENCH_ONLY=deadbolt,redislock node bench/redis-cost.js
// BENCH_RUNS (3) interleaved rounds. Needs valgrind (Debian: apt-get install valgrind); writes
// bench/RESULTS-redis-cost.md.

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { spawn, spawnSync, execFileSync } = require('node:child_process')
const { LIBS } = require('./adapters')
const { config } = require('./config')
const { fmt, sleep, median, spread, which, rotated } = require('./util')

const cfg = config(process.env)
const FEW = Number(process.env.BENCH_COST_FEW || 200)
const MANY = Number(process.env.BENCH_COST_MANY || 1200)
const libs = Object.keys(LIBS).filter((l) => LIBS[l].backend === 'redis' && LIBS[l].scenarios.includes(1) && (!cfg.only || cfg.only.includes(l)))

for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(130))

const REDIS_SERVER = which('redis-server', ['/usr/sbin', '/usr/local/bin'])

/** A private redis-server under callgrind, with counters that can be zeroed and read. */
async function countedRedis(dir) {
  const port = 20000 + Math.floor(Math.random() * 20000)
  const out = path.join(dir, 'callgrind.out')
  // `--hz 1`: the server's cron runs HZ times per second of wall time, whatever the clients
  // do, so at Redis's default of 10 a run that a loaded box makes slower counts more of it
  // (redislock's pair: 34.6k instructions on a quiet box, 43.2k at load 24). At 1 it is ~1 %.
  const child = spawn('valgrind', ['--tool=callgrind', `--callgrind-out-file=${out}`, REDIS_SERVER, '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--hz', '1'], { stdio: 'ignore' })
  const kill = () => child.kill('SIGKILL')
  process.on('exit', kill)
  const ping = () => spawnSync('redis-cli', ['-p', String(port), 'PING'], { encoding: 'utf8' }).stdout.trim() === 'PONG'
  for (let i = 0; i < 150 && !ping(); i++) await sleep(200)
  if (!ping()) throw new Error(`redis-server under callgrind did not answer on port ${port}`)
  let dumps = 0
  return {
    url: `redis://127.0.0.1:${port}`,
    zero: () => execFileSync('callgrind_control', ['-z', String(child.pid)], { stdio: 'ignore' }),
    /** Instructions executed since the last zero. */
    async read() {
      execFileSync('callgrind_control', ['-d', String(child.pid)], { stdio: 'ignore' })
      const file = `${out}.${++dumps}`
      for (let i = 0; i < 100 && !fs.existsSync(file); i++) await sleep(100)
      const m = /^(?:summary|totals): (\d+)/m.exec(fs.readFileSync(file, 'utf8'))
      if (!m) throw new Error(`no instruction count in ${file}`)
      return Number(m[1])
    },
    stop() {
      kill()
      process.off('exit', kill)
    },
  }
}

function worker(lib, url, pairs) {
  const wcfg = { ...cfg, urls: { ...cfg.urls, redis: url }, s1Warmup: 50, s1Pairs: pairs, s1MaxSeconds: 600, timeoutMs: 900_000 }
  const r = spawnSync(process.execPath, ['--expose-gc', path.join(__dirname, 'worker.js'), lib, '1', JSON.stringify(wcfg)], { cwd: path.join(__dirname, '..'), encoding: 'utf8', timeout: 900_000 })
  const line = (r.stdout || '').split('\n').find((l) => l.startsWith('RESULT '))
  const result = line && JSON.parse(line.slice(7))
  if (!result || result.error) throw new Error(`${lib}: ${result ? result.error : (r.stderr || '').trim().split('\n').pop()}`)
  if (result.pairs !== pairs) throw new Error(`${lib}: ran ${result.pairs} pairs instead of ${pairs}`)
  return result
}

async function main() {
  if (!which('valgrind') || !which('callgrind_control') || !REDIS_SERVER) {
    console.error('bench/redis-cost.js needs valgrind and redis-server (Debian: apt-get install valgrind redis-server)')
    process.exit(1)
  }
  const perPair = {}
  for (let run = 0; run < cfg.runs; run++) {
    // Interleaved rounds, the order rotating, as in run.js.
    for (const lib of rotated(libs, run)) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dbcost-'))
      const redis = await countedRedis(dir)
      try {
        const count = async (pairs) => {
          redis.zero()
          worker(lib, redis.url, pairs)
          return redis.read()
        }
        // One unmeasured run first: the server compiles the library's scripts (and grows its
        // tables) on the first one only, which would otherwise land in FEW's count alone.
        worker(lib, redis.url, FEW)
        const few = await count(FEW)
        const many = await count(MANY)
        const x = (many - few) / (MANY - FEW)
        ;(perPair[lib] ||= []).push(x)
        process.stdout.write(`[run ${run + 1}/${cfg.runs}] ${LIBS[lib].label}: ${fmt(x)} instructions per pair\n`)
      } finally {
        redis.stop()
        fs.rmSync(dir, { recursive: true, force: true })
      }
    }
  }
  const rows = libs.map((lib) => ({ lib, perPair: median(perPair[lib]), runs: perPair[lib] }))
  const base = rows.find((r) => r.lib === 'redislock')?.perPair
  const md = [
    '# Redis instructions per acquire+release pair — `node bench/redis-cost.js`',
    '',
    `Generated on ${new Date().toISOString()}; median (min–max) of ${cfg.runs} interleaved runs. Scenario 1 (sequential pairs on distinct keys, bench/worker.js) against a private redis-server (${execFileSync(REDIS_SERVER, ['--version'], { encoding: 'utf8' }).trim().split(' ').slice(0, 3).join(' ')}) (\`--hz 1\`) under callgrind: instructions Redis executed for ${MANY} pairs minus those for ${FEW}, divided by ${MANY - FEW}. Instructions, not seconds: the count barely depends on the load on the machine (the server's cron, which runs per second of wall time, is kept to 1 Hz; a pipelined load costs Redis fewer instructions per command than this sequential one, for every library alike).`,
    '',
    '| library | Redis instructions per pair | ÷ redislock |',
    '| --- | --- | --- |',
    ...rows.map((r) => `| ${LIBS[r.lib].label} | ${spread(r.runs)} | ${base ? `${fmt(r.perPair / base, 2)}×` : '–'} |`),
    '',
  ]
  const file = cfg.only ? 'RESULTS-redis-cost-partial.md' : 'RESULTS-redis-cost.md'
  fs.writeFileSync(path.join(__dirname, file), md.join('\n'))
  process.stdout.write(`wrote bench/${file}\n`)
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
