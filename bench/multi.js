'use strict'
// `node bench/multi.js`: deadbolt beyond one Redis server, side by side with its peers:
// Redlock over 3 and 5 independent servers (node-redlock 4, redis-semaphore's RedlockMutex)
// and a Redis Cluster of 3 primaries (node-redlock on an ioredis Cluster). Scenarios 1–3 of
// the main bench (bench/README.md), each cell a fresh bench/worker.js process, runs
// interleaved round-robin, medians and (min–max) over BENCH_RUNS. Only client-side figures
// are reported: the server counters a worker reads cover one server of several. Starts its
// own throwaway servers on free ports and stops them; writes bench/RESULTS-multi.md.

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const net = require('node:net')
const { spawn, execFile } = require('node:child_process')
const { config } = require('./config')
const { LIBS } = require('./adapters')
const { spread, median, fmt, sleep } = require('./util')

const cfg = config()
const ROOT = path.join(__dirname, '..')
const SCENARIOS = (cfg.scenarios ?? [1, 2, 3]).filter((s) => s <= 3)
const BACKENDS = ['redlock3', 'redlock5', 'cluster']
const libs = Object.keys(LIBS).filter((l) => BACKENDS.includes(LIBS[l].backend) && (!cfg.only || cfg.only.includes(l)))
const children = new Set()
const servers = []

function freePort(max = 65_535) {
  return new Promise((resolve, reject) => {
    const srv = net.createServer()
    srv.once('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address()
      srv.close(() => (port <= max ? resolve(port) : resolve(freePort(max))))
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

async function redisServer(port, extra = []) {
  const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...extra], { stdio: 'ignore' })
  servers.push(proc)
  for (let i = 0; i < 400 && !(await answers(port)); i++) await sleep(25)
  return `redis://127.0.0.1:${port}`
}

const cli = (args) => new Promise((resolve, reject) => execFile('redis-cli', args, { encoding: 'utf8' }, (err, out) => (err ? reject(err) : resolve(out))))

async function cluster(dir) {
  const ports = []
  // The cluster bus listens on port + 10 000.
  while (ports.length < 3) ports.push(await freePort(55_000))
  const urls = []
  for (const p of ports) urls.push(await redisServer(p, ['--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${p}.conf`, '--dir', dir]))
  await cli(['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-yes'])
  for (;;) {
    const states = await Promise.all(ports.map((p) => cli(['-p', String(p), 'cluster', 'info'])))
    if (states.every((s) => s.includes('cluster_state:ok'))) return urls
    await sleep(50)
  }
}

function runCell(lib, scenario, urls) {
  const wcfg = { ...cfg, urls, timeoutMs: 120_000 }
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--expose-gc', path.join(__dirname, 'worker.js'), lib, String(scenario), JSON.stringify(wcfg)], { cwd: ROOT, stdio: ['ignore', 'pipe', process.env.BENCH_VERBOSE ? 'inherit' : 'ignore'] })
    children.add(child)
    let out = ''
    child.stdout.on('data', (d) => { out += d })
    const killer = setTimeout(() => child.kill('SIGKILL'), 120_000)
    child.on('exit', (code) => {
      clearTimeout(killer)
      children.delete(child)
      const line = out.split('\n').find((l) => l.startsWith('RESULT '))
      resolve(line ? JSON.parse(line.slice(7)) : { error: `exited ${code}` })
    })
  })
}

const COLUMNS = {
  1: [['p50 µs', (r) => r.p50], ['p99 µs', (r) => r.p99]],
  2: [['pairs/s', (r) => r.pairsPerSec], ['client CPU/pair µs', (r) => r.cpuPerPair]],
  3: [['handoff mean ms', (r) => r.handoffMean], ['fairness', (r) => r.fairness], ['violations', (r) => r.violations]],
}
const TITLES = {
  1: '1. Sequential acquire+release on distinct keys',
  2: `2. ${cfg.s2Workers} in flight on distinct keys, ${cfg.s2Seconds} s`,
  3: `3. ${cfg.s3Workers} workers contending for one key, ${cfg.s3Sections} critical sections`,
}

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-bench-multi-'))
  try {
    const five = []
    for (let i = 0; i < 5; i++) five.push(await redisServer(await freePort()))
    const urls = { redlock3: five.slice(0, 3), redlock5: five, cluster: await cluster(dir) }
    const results = {}
    for (let run = 0; run < cfg.runs; run++) {
      for (const s of SCENARIOS) {
        const order = libs.slice(run % libs.length).concat(libs.slice(0, run % libs.length))
        for (const lib of order) {
          const r = await runCell(lib, s, urls)
          ;(results[`${lib}:${s}`] ??= []).push(r)
          process.stderr.write(`run ${run + 1} s${s} ${lib}: ${r.error ?? 'ok'}\n`)
        }
      }
    }
    const md = ['# deadbolt beyond one Redis server', '', `${new Date().toISOString()}, ${os.cpus().length} cores, ${cfg.runs} runs per cell: median (min–max). \`node bench/multi.js\`; see bench/README.md.`, '']
    for (const s of SCENARIOS) {
      md.push(`## ${TITLES[s]}`, '', `| library | ${COLUMNS[s].map(([h]) => h).join(' | ')} |`, `|---|${COLUMNS[s].map(() => '---|').join('')}`)
      for (const lib of libs) {
        const runs = (results[`${lib}:${s}`] ?? []).filter((r) => !r.error)
        const cells = COLUMNS[s].map(([, f]) => spread(runs.map(f)))
        md.push(`| ${LIBS[lib].label} | ${runs.length ? cells.join(' | ') : 'failed'} |`)
      }
      md.push('')
    }
    md.push('## Ratios (medians; deadbolt ÷ peer for pairs/s, peer ÷ deadbolt for times)', '')
    for (const b of BACKENDS) {
      const ours = libs.find((l) => LIBS[l].backend === b && LIBS[l].deadbolt)
      for (const peer of libs.filter((l) => LIBS[l].backend === b && !LIBS[l].deadbolt)) {
        const m = (lib, s, f) => median((results[`${lib}:${s}`] ?? []).filter((r) => !r.error).map(f))
        const parts = []
        if (SCENARIOS.includes(1)) parts.push(`S1 p50 ${fmt(m(peer, 1, (r) => r.p50) / m(ours, 1, (r) => r.p50))}×`)
        if (SCENARIOS.includes(2)) parts.push(`S2 pairs/s ${fmt(m(ours, 2, (r) => r.pairsPerSec) / m(peer, 2, (r) => r.pairsPerSec))}×`)
        if (SCENARIOS.includes(3)) parts.push(`S3 handoff ${fmt(m(peer, 3, (r) => r.handoffMean) / m(ours, 3, (r) => r.handoffMean))}×`)
        md.push(`- ${LIBS[ours].label} vs ${LIBS[peer].label}: ${parts.join(', ')}`)
      }
    }
    md.push('')
    const out = process.env.BENCH_RESULTS || path.join(__dirname, 'RESULTS-multi.md')
    fs.writeFileSync(out, md.join('\n'))
    process.stdout.write(md.join('\n'))
  } finally {
    for (const c of children) c.kill('SIGKILL')
    for (const p of servers) p.kill('SIGKILL')
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
