'use strict'
// `npm run bench`: the same scenarios for deadbolt and its peers, each (library, scenario, run)
// in a child process of its own (bench/worker.js), runs interleaved round-robin so that the
// machine's noise falls on everyone alike. Prints tables as it goes and writes
// bench/RESULTS.md (full run) or bench/RESULTS-partial.md (a subset), plus the raw numbers in
// bench/results.json. See bench/README.md.

const fs = require('node:fs')
const os = require('node:os')
const net = require('node:net')
const path = require('node:path')
const crypto = require('node:crypto')
const { spawn, execFileSync } = require('node:child_process')
const { config } = require('./config')
const { LIBS, SETTINGS, deadboltFingerprint, dynamoTarget } = require('./adapters')
const { median, fmt, spread, sleep, which, rotated } = require('./util')
const { measureLoad, loadTable } = require('./load')

const ROOT = path.join(__dirname, '..')
const cfg = config(process.env)
const started = Date.now()
const log = (s = '') => process.stdout.write(`${s}\n`)

// ───────────────────────────── servers ─────────────────────────────

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}

async function waitPort(port, ms) {
  const end = Date.now() + ms
  while (Date.now() < end) {
    const ok = await new Promise((resolve) => {
      const sock = net.connect(port, '127.0.0.1')
      sock.once('connect', () => { sock.destroy(); resolve(true) })
      sock.once('error', () => resolve(false))
    })
    if (ok) return true
    await sleep(50)
  }
  return false
}

const children = new Set()
process.on('exit', () => { for (const c of children) try { c.kill('SIGKILL') } catch {} })
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(130))

/** A throwaway redis-server (no persistence), so nobody else's traffic lands in the counts. */
async function privateRedis() {
  const bin = which('redis-server', ['/usr/sbin', '/usr/local/bin'])
  if (!bin) throw new Error('redis-server not found')
  const port = await freePort()
  const child = spawn(bin, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no', '--logfile', ''], { stdio: 'ignore' })
  children.add(child)
  if (!(await waitPort(port, 5000))) throw new Error('private redis-server did not answer')
  return {
    url: `redis://127.0.0.1:${port}`,
    how: `private redis-server on port ${port} (--save "" --appendonly no)`,
    async stop() {
      child.kill('SIGTERM')
      children.delete(child)
    },
  }
}

/** A throwaway MariaDB/MySQL with default settings in a temporary data directory. */
async function privateMysql() {
  const server = which('mariadbd', ['/usr/sbin', '/usr/local/sbin', '/usr/local/bin']) || which('mysqld', ['/usr/sbin', '/usr/local/sbin'])
  const install = which('mariadb-install-db', ['/usr/bin', '/usr/local/bin']) || which('mysql_install_db', ['/usr/bin', '/usr/local/bin'])
  if (!server || !install) throw new Error('mariadbd / mariadb-install-db not found')
  const root = process.getuid && process.getuid() === 0
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dbbench-mariadb-'))
  const user = root ? ['--user=mysql'] : []
  if (root) execFileSync('chown', ['mysql:mysql', dir])
  execFileSync(install, ['--no-defaults', `--datadir=${dir}/data`, '--auth-root-authentication-method=normal', '--skip-test-db', ...user], { stdio: 'ignore' })
  const port = await freePort()
  const child = spawn(server, ['--no-defaults', `--datadir=${dir}/data`, `--socket=${dir}/sock`, `--port=${port}`, '--bind-address=127.0.0.1', `--pid-file=${dir}/pid`, `--log-error=${dir}/err.log`, ...user], { stdio: 'ignore' })
  children.add(child)
  const exited = new Promise((resolve) => child.once('exit', resolve))
  if (!(await waitPort(port, 15000))) throw new Error('private mariadbd did not answer')
  const mysql = require('mysql2/promise')
  let conn
  for (let i = 0; ; i++) {
    try {
      conn = await mysql.createConnection({ host: '127.0.0.1', port, user: 'root' })
      break
    } catch (err) {
      if (i > 50) throw err
      await sleep(100)
    }
  }
  await conn.query('CREATE DATABASE IF NOT EXISTS test')
  await conn.end()
  return {
    url: `mysql://root@127.0.0.1:${port}/test`,
    how: `private ${path.basename(server)} on port ${port} (--no-defaults, fresh datadir)`,
    pid: child.pid,
    async stop() {
      child.kill('SIGTERM')
      await Promise.race([exited, sleep(15000)])
      children.delete(child)
      fs.rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** A fresh temporary directory for the SQLite file and the lock files of proper-lockfile. */
function privateSqliteDir() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dbbench-sqlite-'))
  let fsType = 'unknown filesystem'
  try {
    fsType = execFileSync('stat', ['-f', '-c', '%T', dir], { encoding: 'utf8' }).trim()
  } catch {}
  return {
    url: `sqlite://${path.join(dir, 'locks.db')}`,
    how: `files in a fresh ${dir} (${fsType})`,
    async stop() {
      fs.rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** A throwaway PostgreSQL with default settings (fsync and synchronous_commit on; max_connections 200) in a temporary directory. */
async function privatePostgres() {
  const { ThrowawayPostgres } = require('../__test__/fixtures/postgres')
  // Room for the peers' connection per holder: 100 workers in scenario 2, plus the margin.
  const pg = await ThrowawayPostgres.create({ port: await freePort(), maxConnections: 200 })
  await pg.start()
  const pid = Number(fs.readFileSync(path.join(pg.datadir, 'postmaster.pid'), 'utf8').split('\n')[0])
  return {
    url: pg.url,
    how: `private postgres on port ${pg.port} (initdb defaults, fresh data directory)`,
    pid,
    stop: () => pg.destroy(),
  }
}

/** A private dynalite (the DynamoDB API in memory, one Node process) with the bench's table. */
async function privateDynalite() {
  const port = await freePort()
  const child = spawn(process.execPath, [path.join(ROOT, 'node_modules', 'dynalite', 'cli.js'), '--port', String(port), '--host', '127.0.0.1', '--createTableMs', '0'], { stdio: 'ignore' })
  children.add(child)
  if (!(await waitPort(port, 10000))) throw new Error('private dynalite did not answer')
  const url = `dynamodb://dbbench_locks?region=us-east-1&endpoint=http://127.0.0.1:${port}`
  await createDynamoTable(url)
  return {
    url,
    how: `private dynalite on port ${port} (in memory)`,
    pid: child.pid,
    port,
    async stop() {
      child.kill('SIGTERM')
      children.delete(child)
    },
  }
}

/** The lock table every DynamoDB library shares: partition key `key` (S), on-demand. */
async function createDynamoTable(url) {
  process.env.AWS_SDK_JS_SUPPRESS_MAINTENANCE_MODE_MESSAGE = '1'
  const { DynamoDB } = require('aws-sdk')
  const { table, endpoint, region } = dynamoTarget(url)
  const db = new DynamoDB({ endpoint, region })
  try {
    await db.createTable({ TableName: table, BillingMode: 'PAY_PER_REQUEST', KeySchema: [{ AttributeName: 'key', KeyType: 'HASH' }], AttributeDefinitions: [{ AttributeName: 'key', AttributeType: 'S' }] }).promise()
  } catch (err) {
    if (err.code !== 'ResourceInUseException') throw err
  }
  await db.waitFor('tableExists', { TableName: table, $waiter: { delay: 1 } }).promise()
}

/** The tables' name for each store. */
const BACKEND_TITLES = { redis: 'Redis', mysql: 'MySQL / MariaDB', postgres: 'PostgreSQL', sqlite: 'SQLite / local files', dynamodb: 'DynamoDB (dynalite)' }
const URL_VARIABLES = { redis: 'BENCH_REDIS_URL', mysql: 'BENCH_MYSQL_URL', postgres: 'BENCH_PG_URL', sqlite: 'BENCH_SQLITE_URL', dynamodb: 'BENCH_DYNAMODB_URL' }

async function serverVersion(backend, url) {
  if (backend === 'sqlite') return 'no server: SQLite (bundled in deadbolt, WAL) and proper-lockfile lock directories on the same disk'
  try {
    if (backend === 'dynamodb') {
      await createDynamoTable(url)
      const endpoint = dynamoTarget(url).endpoint
      return endpoint ? `dynalite ${require('dynalite/package.json').version} (or another server) at ${endpoint}` : 'DynamoDB'
    }
    if (backend === 'redis') {
      const Redis = require('ioredis')
      const c = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null })
      await c.connect()
      const info = await c.info('server')
      c.disconnect()
      return `Redis ${/redis_version:(\S+)/.exec(info)[1]}`
    }
    if (backend === 'postgres') {
      const { Client } = require('pg')
      const c = new Client({ connectionString: url })
      await c.connect()
      const { rows: [row] } = await c.query("SELECT current_setting('server_version') AS v, current_setting('synchronous_commit') AS sc, current_setting('max_connections') AS mc")
      await c.end()
      return `PostgreSQL ${row.v} (synchronous_commit=${row.sc}, max_connections=${row.mc})`
    }
    const mysql = require('mysql2/promise')
    const c = await mysql.createConnection(url)
    const [[row]] = await c.query('SELECT VERSION() AS v')
    const [[flush]] = await c.query("SHOW VARIABLES LIKE 'innodb_flush_log_at_trx_commit'")
    const [[maxc]] = await c.query("SHOW VARIABLES LIKE 'max_connections'")
    await c.end()
    return `${/mariadb/i.test(row.v) ? 'MariaDB' : 'MySQL'} ${row.v} (innodb_flush_log_at_trx_commit=${flush.Value}, max_connections=${maxc.Value})`
  } catch (err) {
    return null
  }
}

/** Removes what earlier (possibly crashed) runs left on a shared server. */
async function cleanup(backend, url) {
  if (backend === 'sqlite') return 0 // a fresh directory every run
  // DynamoDB: the bench has a table of its own (on a shared server its items stay).
  if (backend === 'dynamodb') return 0
  try {
    if (backend === 'redis') {
      const { RedisProbe } = require('./probes')
      const p = new RedisProbe(url)
      await p.open()
      const n = await p.cleanup(`*${cfg.prefix}:*`)
      await p.close()
      return n
    }
    if (backend === 'postgres') {
      const { Client } = require('pg')
      const c = new Client({ connectionString: url })
      await c.connect()
      let n = 0
      try {
        const upper = Buffer.from(`${cfg.prefix};`)
        n = (await c.query('DELETE FROM deadbolt_locks WHERE name >= $1 AND name < $2', [Buffer.from(`${cfg.prefix}:`), upper])).rowCount
      } catch {}
      await c.end()
      return n
    }
    const mysql = require('mysql2/promise')
    const c = await mysql.createConnection(url)
    let n = 0
    for (const [table, col] of [['deadbolt_locks', 'name'], ['lockings', 'id']]) {
      try {
        const [r] = await c.query(`DELETE FROM ${table} WHERE ${col} LIKE ?`, [`${cfg.prefix}:%`])
        n += r.affectedRows
      } catch {}
    }
    await c.end()
    return n
  } catch {
    return 0
  }
}

// ───────────────────────────── machine ─────────────────────────────

function machine() {
  let cpuModel = os.cpus()[0]?.model || 'unknown'
  try {
    const m = /model name\s*:\s*(.+)/.exec(fs.readFileSync('/proc/cpuinfo', 'utf8'))
    if (m) cpuModel = m[1].trim()
  } catch {}
  return {
    node: process.version,
    cpu: cpuModel,
    cores: os.cpus().length,
    kernel: `${os.type()} ${os.release()} ${os.arch()}`,
    memory: `${Math.round(os.totalmem() / 2 ** 30)} GiB`,
  }
}

function addonFingerprint() {
  try {
    const f = deadboltFingerprint()
    return f.addon ? `build ${f.id} (${f.addon} built ${f.built}, + index.js, lib/, compat/)` : 'absent'
  } catch {
    return 'unreadable'
  }
}

// ───────────────────────────── running cells ─────────────────────────────

function cellTimeoutMs(s) {
  switch (s) {
    case 1: return 60_000
    case 2: return (cfg.s2Seconds + 45) * 1000
    case 3: return (cfg.s3MaxSeconds + 45) * 1000
    case 4: return cfg.s4AcquireTimeoutMs + 60_000
    case 5: return cfg.s5AcquireTimeoutMs + cfg.s5Seconds * 1000 + 60_000
    default: return 60_000
  }
}

function runCell(lib, scenario, urls, extra) {
  const timeoutMs = cellTimeoutMs(scenario)
  const wcfg = { ...cfg, urls, timeoutMs, ...extra }
  return new Promise((resolve) => {
    const t0 = Date.now()
    const child = spawn(process.execPath, ['--expose-gc', path.join(__dirname, 'worker.js'), lib, String(scenario), JSON.stringify(wcfg)], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] })
    children.add(child)
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => { out += d })
    child.stderr.on('data', (d) => {
      err += d
      if (err.length > 20000) err = err.slice(-10000)
      if (process.env.BENCH_VERBOSE) process.stderr.write(d)
    })
    const killer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
    child.on('exit', (code, signal) => {
      clearTimeout(killer)
      children.delete(child)
      const wall = (Date.now() - t0) / 1000
      const line = out.split('\n').find((l) => l.startsWith('RESULT '))
      if (line) {
        try {
          return resolve({ ...JSON.parse(line.slice(7)), wall })
        } catch {}
      }
      const lastErr = err.trim().split('\n').filter(Boolean).slice(-1)[0]
      const reason = signal === 'SIGKILL' ? `killed after ${Math.round(timeoutMs / 1000)} s (hung)` : `exited ${code ?? signal}${lastErr ? `: ${lastErr}` : ''}`
      resolve({ lib, scenario, error: reason, wall })
    })
  })
}

// ───────────────────────────── presentation ─────────────────────────────

const SCENARIO_TITLES = {
  1: '1. Sequential acquire+release on distinct keys (µs per pair)',
  2: `2. ${cfg.s2Workers} in flight on distinct keys, ${cfg.s2Seconds} s`,
  3: `3. ${cfg.s3Workers} workers contending for one key, hold ${cfg.s3HoldMs} ms (setTimeout), ${cfg.s3Sections} critical sections`,
  4: `4. ${cfg.s4Locks.toLocaleString('en-US')} locks held at once`,
  5: `5. ${cfg.s5Locks.toLocaleString('en-US')} auto-extended locks (ttl ${SETTINGS.autoTtl} ms, extended every ${SETTINGS.autoEvery} ms), measured over ${cfg.s5Seconds} s`,
}

const ok = (runs) => runs.filter((r) => !r.error)
const vals = (runs, f) => ok(runs).map(f).filter((x) => typeof x === 'number' && Number.isFinite(x))
const col = (runs, f, d) => spread(vals(runs, f), d)
const pct = (x) => x * 100

function failedCell(runs) {
  const bad = runs.filter((r) => r.error)
  if (bad.length === 0) return null
  if (bad.length === runs.length) return `failed: ${bad[0].error}`
  return null
}

function failNote(runs) {
  const bad = runs.filter((r) => r.error)
  if (bad.length === 0 || bad.length === runs.length) return ''
  return ` (${bad.length}/${runs.length} runs failed: ${bad[0].error})`
}

/** Column definitions per scenario and backend: [header, (runs) => cell]. */
function columns(s, backend) {
  const redis = backend === 'redis'
  // SQLite and lock files have no server to count.
  const server = backend !== 'sqlite'
  // dynalite keeps no counters of the requests it serves.
  // PostgreSQL has no statement counter that is exact over a few seconds.
  const counted = server && backend !== 'dynamodb' && backend !== 'postgres'
  switch (s) {
    case 1:
      return [
        ['p50 µs', (r) => col(r, (x) => x.p50)],
        ['p90 µs', (r) => col(r, (x) => x.p90)],
        ['p99 µs', (r) => col(r, (x) => x.p99)],
        ['pairs/run', (r) => col(r, (x) => x.pairs)],
      ]
    case 2:
      return [
        ['pairs/s', (r) => col(r, (x) => x.pairsPerSec)],
        ['client CPU µs/pair', (r) => col(r, (x) => x.cpuPerPair)],
        ...(server ? [[`${redis ? 'Redis' : 'server'} CPU µs/pair`, (r) => col(r, (x) => x.serverCpuPerPair)]] : []),
        ...(redis ? [['Redis commands/pair', (r) => col(r, (x) => x.cmdsPerPair)]] : []),
        ['workers', (r) => ok(r)[0] ? String(ok(r)[0].workers) + (ok(r)[0].capped ? '*' : '') : '–'],
      ]
    case 3:
      return [
        ['handoff mean ms', (r) => col(r, (x) => x.handoffMean)],
        ['handoff p50 ms', (r) => col(r, (x) => x.handoffP50)],
        ['handoff p99 ms', (r) => col(r, (x) => x.handoffP99)],
        ['sections/s', (r) => col(r, (x) => x.sectionsPerSec)],
        ['fairness min/max share', (r) => col(r, (x) => x.fairness, 2)],
        ['releaser re-takes %', (r) => col(r, (x) => pct(x.selfRetake), 2)],
        ...(redis
          ? [
              ['Redis commands/section', (r) => col(r, (x) => x.cmdsPerSection)],
              ['round trips (reads)/section', (r) => col(r, (x) => x.readsPerSection)],
            ]
          : counted ? [['SQL statements/section', (r) => col(r, (x) => x.questionsPerSection)]] : []),
        ['violations', (r) => (ok(r).length ? String(ok(r).reduce((a, x) => a + x.violations, 0)) : '–')],
      ]
    case 4:
      return [
        ['held', (r) => {
          const o = ok(r)
          if (!o.length) return '–'
          const x = o[0]
          if (x.stalled) return `**${median(vals(r, (y) => y.held))} max** (stalled)`
          if (x.capped) return `**${median(vals(r, (y) => y.held))} max** (1 connection per lock)`
          return col(r, (y) => y.held)
        }],
        ['client heap+external B/lock', (r) => (ok(r)[0]?.stalled ? '–' : col(r, (x) => x.heapPerLock))],
        ['client RSS B/lock', (r) => (ok(r)[0]?.stalled ? '–' : col(r, (x) => x.rssPerLock))],
        ...(redis ? [['Redis used_memory B/lock', (r) => (ok(r)[0]?.stalled ? '–' : col(r, (x) => x.serverMemPerLock))]] : []),
        ...(server ? [['server connections', (r) => col(r, (x) => x.connections)]] : []),
        ['acquire all, s', (r) => (ok(r)[0]?.stalled ? '–' : col(r, (x) => x.acquireSeconds))],
      ]
    case 5:
      return [
        ['still held at end (lib / server)', (r) => {
          const o = ok(r)
          if (!o.length) return '–'
          const all = o.every((x) => x.libHeld === x.locks && (x.serverHeld === undefined || x.serverHeld === x.locks) && x.lost === 0)
          const worst = o.reduce((a, x) => (Math.min(x.libHeld, x.serverHeld ?? x.libHeld) < Math.min(a.libHeld, a.serverHeld ?? a.libHeld) ? x : a))
          return `${all ? 'yes' : '**NO**'} ${worst.libHeld}/${worst.serverHeld ?? '?'} of ${worst.locks}${worst.lost ? `, ${worst.lost} lost` : ''}`
        }],
        ...(redis
          ? [
              ['Redis commands/tick', (r) => col(r, (x) => x.cmdsPerTick)],
              ['scripts (EVALSHA)/tick', (r) => col(r, (x) => x.scriptsPerTick)],
              ['round trips (reads)/tick', (r) => col(r, (x) => x.readsPerTick)],
            ]
          : counted ? [['SQL statements/tick', (r) => col(r, (x) => x.questionsPerTick)]] : []),
        ['client CPU ms/tick', (r) => col(r, (x) => x.cpuPerTick / 1000)],
        ['server CPU ms/tick', (r) => col(r, (x) => x.serverCpuPerTick / 1000)],
      ]
    default:
      return []
  }
}

function table(s, backend, results, libs) {
  const cols = columns(s, backend)
  const head = ['library', ...cols.map((c) => c[0])]
  const rows = [head, head.map(() => '---')]
  const notes = []
  for (const lib of libs) {
    const runs = results[lib]?.[s]
    if (!runs || runs.length === 0) continue
    const failed = failedCell(runs)
    const label = LIBS[lib].label
    if (failed) {
      rows.push([label, failed, ...cols.slice(1).map(() => '')])
      continue
    }
    rows.push([label, ...cols.map((c) => c[1](runs))])
    const fn = failNote(runs)
    if (fn) notes.push(`${label}${fn}`)
    const o = ok(runs)
    if (o[0]?.capped && s !== 4) notes.push(`${label}: capped at ${o[0].capped}`)
    if (s === 4 && o[0]?.capped) notes.push(`${label}: ${o[0].capped}`)
    if (s === 4 && o[0]?.stalled) notes.push(`${label}: ${o[0].stalled}`)
    const builds = [...new Set(runs.map((x) => x.build).filter(Boolean))]
    if (builds.length > 1) notes.push(`${label}: its ${runs.length} runs used ${builds.length} different deadbolt builds (${runs.map((x) => `run ${x.run}: ${x.build || '?'}`).join(', ')}) — rebuilt during the bench`)
    const errs = o.reduce((a, x) => a + (x.errors || 0), 0)
    if (errs) notes.push(`${label}: ${errs} errors during the runs`)
    const w = o.flatMap((x) => x.warnings || [])
    if (w.length) notes.push(`${label}: ${[...new Set(w)].slice(0, 2).join('; ')}`)
  }
  if (rows.length === 2) return null
  let md = rows.map((r) => `| ${r.join(' | ')} |`).join('\n')
  if (notes.length) md += `\n\n${notes.map((n) => `- ${n}`).join('\n')}`
  return md
}

/** deadbolt ÷ peer for the headline metric of each scenario. */
const RATIO_METRICS = [
  [1, 'p50 latency', (x) => x.p50, 'lower'],
  [2, 'pairs/s', (x) => x.pairsPerSec, 'higher'],
  [2, 'client CPU/pair', (x) => x.cpuPerPair, 'lower'],
  [2, 'server CPU/pair', (x) => x.serverCpuPerPair, 'lower'],
  [2, 'commands/pair', (x) => x.cmdsPerPair, 'lower'],
  [3, 'handoff mean', (x) => x.handoffMean, 'lower'],
  [3, 'commands/section', (x) => x.cmdsPerSection ?? x.questionsPerSection, 'lower'],
  [3, 'round trips/section', (x) => x.readsPerSection ?? x.questionsPerSection, 'lower'],
  [4, 'heap/lock', (x) => (x.stalled ? NaN : x.heapPerLock), 'lower'],
  [5, 'client CPU/tick', (x) => x.cpuPerTick, 'lower'],
  [5, 'round trips/tick', (x) => x.readsPerTick ?? x.questionsPerTick, 'lower'],
]

function ratios(results, backend, libs) {
  const ours = libs.filter((l) => LIBS[l].deadbolt && LIBS[l].backend === backend)
  const peers = libs.filter((l) => !LIBS[l].deadbolt && LIBS[l].backend === backend)
  const metrics = RATIO_METRICS.filter(([s]) => cfg.scenarios.includes(s))
  const head = ['deadbolt ÷ peer', ...metrics.map(([s, name]) => `${s}. ${name}`)]
  const rows = [head, head.map(() => '---')]
  for (const me of ours) {
    // compareTo may name another deadbolt row (the observed and baseline ones name plain deadbolt).
    const vs = LIBS[me].compareTo ? libs.filter((p) => p === LIBS[me].compareTo && LIBS[p].backend === backend) : peers
    for (const peer of vs) {
      const row = [`${LIBS[me].label} vs ${LIBS[peer].label}`]
      let any = false
      for (const [s, name, f, better] of metrics) {
        const a = median(vals(results[me]?.[s] || [], f))
        const b = median(vals(results[peer]?.[s] || [], f))
        if (Number.isFinite(a) && Number.isFinite(b) && b !== 0) {
          const r = a / b
          const good = better === 'lower' ? r < 1 : r > 1
          row.push(`${fmt(r, 2)}× ${Math.abs(r - 1) < 0.05 ? '(≈)' : good ? '(better)' : '(worse)'}`)
          any = true
        } else row.push('–')
      }
      if (any) rows.push(row)
    }
  }
  if (rows.length === 2) return null
  return rows.map((r) => `| ${r.join(' | ')} |`).join('\n')
}

function cellLine(r) {
  const label = LIBS[r.lib]?.label || r.lib
  if (r.error) return `${label}: FAILED ${r.error}`
  switch (r.scenario) {
    case 1: return `${label}: p50 ${fmt(r.p50)} µs, p90 ${fmt(r.p90)}, p99 ${fmt(r.p99)} (${r.pairs} pairs)`
    case 2: return `${label}: ${fmt(r.pairsPerSec)} pairs/s, client CPU ${fmt(r.cpuPerPair)} µs/pair, server CPU ${fmt(r.serverCpuPerPair)} µs/pair${r.errors ? `, ${r.errors} errors` : ''}`
    case 3: return `${label}: handoff mean ${fmt(r.handoffMean)} ms (p50 ${fmt(r.handoffP50)}, p99 ${fmt(r.handoffP99)}), fairness ${fmt(r.fairness, 2)}, re-take ${fmt(pct(r.selfRetake), 2)} %, ${r.cmdsPerSection !== undefined ? `${fmt(r.cmdsPerSection)} cmds + ${fmt(r.readsPerSection)} reads` : `${fmt(r.questionsPerSection)} statements`}/section, ${r.violations} violations`
    case 4: return `${label}: ${r.held} held${r.stalled ? ` (${r.stalled})` : ''}${r.capped ? ` (capped: ${r.capped})` : ''}, heap ${fmt(r.heapPerLock)} B/lock, RSS ${fmt(r.rssPerLock)} B/lock, server ${fmt(r.serverMemPerLock)} B/lock, ${r.connections} connections`
    case 5: return `${label}: ${r.libHeld}/${r.serverHeld ?? '?'} of ${r.locks} held, ${r.lost} lost, ${r.cmdsPerTick !== undefined ? `${fmt(r.cmdsPerTick)} cmds, ${fmt(r.scriptsPerTick)} scripts, ${fmt(r.readsPerTick)} reads` : `${fmt(r.questionsPerTick)} statements`}/tick, CPU ${fmt(r.cpuPerTick / 1000)} ms/tick`
    default: return JSON.stringify(r)
  }
}

// ───────────────────────────── main ─────────────────────────────

async function main() {
  const libs = Object.keys(LIBS).filter((l) => (!cfg.only || cfg.only.includes(l)) && cfg.backends.includes(LIBS[l].backend))
  if (cfg.only) for (const l of cfg.only) if (!LIBS[l]) throw new Error(`BENCH_ONLY: unknown library "${l}" (known: ${Object.keys(LIBS).join(', ')})`)
  const backends = [...new Set(libs.map((l) => LIBS[l].backend))]
  const full = !cfg.only && cfg.scenarios.length === 5 && backends.length === cfg.backends.length && !process.env.BENCH_BACKENDS
  const resultsPath = cfg.results || path.join(__dirname, full ? 'RESULTS.md' : 'RESULTS-partial.md')

  // Servers: private throwaway instances unless told otherwise (or unavailable).
  // dynalite checks no signature; the libraries still need credentials to sign with.
  if (backends.includes('dynamodb') && !process.env.AWS_ACCESS_KEY_ID) {
    process.env.AWS_ACCESS_KEY_ID = 'AKIDDBBENCH'
    process.env.AWS_SECRET_ACCESS_KEY = 'dbbench'
  }
  const urls = { ...cfg.urls }
  const servers = {}
  const stops = []
  const usePrivate = process.env.BENCH_PRIVATE_SERVERS !== '0'
  for (const b of backends) {
    const given = process.env[URL_VARIABLES[b]]
    // SQLite has no server to share: always a fresh directory unless a URL is given.
    if ((usePrivate || b === 'sqlite') && !given) {
      try {
        const s = await { redis: privateRedis, mysql: privateMysql, postgres: privatePostgres, sqlite: privateSqliteDir, dynamodb: privateDynalite }[b]()
        urls[b] = s.url
        servers[b] = { how: s.how, private: true, pid: s.pid, port: s.port }
        stops.push(s.stop)
      } catch (err) {
        log(`(could not start a private ${b} server: ${err.message}; using ${urls[b]})`)
        servers[b] = { how: `shared server at ${urls[b]} (private one failed: ${err.message})` }
      }
    } else {
      servers[b] = { how: `shared server at ${urls[b]}` }
    }
    servers[b].version = await serverVersion(b, urls[b])
    if (!servers[b].version) servers[b].down = true
    else servers[b].cleaned = await cleanup(b, urls[b])
  }

  const m = machine()
  const addonStart = addonFingerprint()
  log(`deadbolt bench — ${new Date().toISOString()}`)
  log(`node ${m.node}, ${m.cpu}, ${m.cores} cores, ${m.kernel}; load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`)
  for (const b of backends) log(`${b}: ${servers[b].version || 'UNREACHABLE'} — ${servers[b].how}`)
  log(`addon: ${addonStart}`)
  log(`runs ${cfg.runs}, scenarios ${cfg.scenarios.join(',')}, libraries ${libs.join(', ')}`)

  // Module load: a full run measures it (BENCH_LOAD_ROUNDS=0 skips it), a partial one when asked.
  let load = null
  if (cfg.loadRounds > 0 && (full || process.env.BENCH_LOAD_ROUNDS)) {
    log(`\n## Module load (${cfg.loadRounds} interleaved rounds)`)
    load = measureLoad(cfg.loadRounds)
    log(loadTable(load))
  }

  const results = {}
  const addonsSeen = new Set([addonStart])
  for (const s of cfg.scenarios) {
    const cellLibs = libs.filter((l) => LIBS[l].scenarios.includes(s))
    if (cellLibs.length === 0) continue
    log(`\n## ${SCENARIO_TITLES[s]}`)
    for (let run = 1; run <= cfg.runs; run++) {
      for (const lib of rotated(cellLibs, run - 1)) {
        const b = LIBS[lib].backend
        let r
        if (servers[b].down) r = { lib, scenario: s, error: `${b} server unreachable at ${urls[b]}` }
        else {
          if (LIBS[lib].deadbolt) addonsSeen.add(addonFingerprint())
          r = await runCell(lib, s, urls, { mysqlPid: servers.mysql?.pid, dynalitePid: servers.dynamodb?.pid, dynalitePort: servers.dynamodb?.port, pgPid: servers.postgres?.pid })
        }
        r.run = run
        ;((results[lib] ||= {})[s] ||= []).push(r)
        log(`  [run ${run}/${cfg.runs}] ${cellLine(r)}  (${r.wall?.toFixed(1) ?? '?'} s)`)
      }
    }
    for (const b of backends) {
      const t = table(s, b, results, cellLibs.filter((l) => LIBS[l].backend === b))
      if (t) log(`\n### ${BACKEND_TITLES[b]}\n${t}`)
    }
  }
  const addonEnd = addonFingerprint()
  addonsSeen.add(addonEnd)
  const buildsUsed = [...new Set(Object.values(results).flatMap((byS) => Object.values(byS).flat()).map((r) => r.build).filter(Boolean))]

  const elapsed = (Date.now() - started) / 1000
  for (const b of backends) if (!servers[b].private && !servers[b].down) await cleanup(b, urls[b])
  for (const stop of stops) await stop().catch(() => {})

  // ───── RESULTS.md ─────
  const md = []
  md.push('# deadbolt vs its peers — `npm run bench`')
  md.push('')
  md.push(`Generated by \`bench/run.js\` on ${new Date().toISOString()} in ${Math.round(elapsed)} s. Every cell is the **median over ${cfg.runs} runs** with the **(min–max) spread** in brackets; each run is a fresh child process (\`node --expose-gc bench/worker.js <lib> <scenario>\`), and runs are interleaved round-robin across libraries (the order rotates each round). See \`bench/README.md\` for the definitions.`)
  md.push('')
  md.push('## Machine')
  md.push('')
  md.push(`- Node ${m.node}; CPU ${m.cpu}, ${m.cores} cores; ${m.kernel}; ${m.memory} RAM`)
  for (const b of backends) md.push(`- ${BACKEND_TITLES[b]}: ${servers[b].version || 'unreachable'} — ${servers[b].how}`)
  md.push(`- deadbolt: ${addonStart}${buildsUsed.length > 1 || addonsSeen.size > 1 ? ` — **deadbolt was rebuilt/edited during the run**: the workers loaded ${buildsUsed.length} different builds (${buildsUsed.join(', ')}; at the end: ${addonEnd}); cells that mixed builds say so below` : ''}`)
  md.push(`- Load average at the end: ${os.loadavg().map((x) => x.toFixed(2)).join(' ')} (shared machine: expect noise)`)
  md.push('')
  md.push('## Settings (the same for every library)')
  md.push('')
  md.push(`- Lease (ttl) ${SETTINGS.ttl} ms; ${SETTINGS.retryDelay} ms between attempts; unlimited retries (deadbolt: \`wait: Infinity, retryDelay: ${SETTINGS.retryDelay}\` with its default jitter ±50 %; deadbolt's redislock face, redislock: \`retries: -1, delay: ${SETTINGS.retryDelay}\`; redlock: \`retryCount: -1, retryDelay: ${SETTINGS.retryDelay}, retryJitter: ${SETTINGS.redlockJitter}\`; redis-semaphore: \`acquireTimeout: Infinity, retryInterval: ${SETTINGS.retryDelay}, refreshInterval: 0\` (auto-refresh only in scenario 5), \`onLockLost\` counts instead of throwing; raw ioredis: \`SET k v PX ${SETTINGS.ttl} NX\` every ${SETTINGS.retryDelay} ms, release by a compare-and-delete script (defineCommand: EVALSHA); sql-lock: \`initialize(uri, {locking_ttl: ${SETTINGS.ttl}})\`, \`getLock(key, ${SETTINGS.ttl})\` — waits on the InnoDB row lock, no client polling; raw GET_LOCK: \`SELECT GET_LOCK(k, ${SETTINGS.getLockTimeoutS})\` on a connection per holder — waits on the server).`)
  if (backends.includes('dynamodb')) md.push(`- DynamoDB: every library on the same server and table (partition key \`key\`); deadbolt \`dynamodb://\` with the settings above; dynamodb-lock-client on aws-sdk ${require('aws-sdk/package.json').version}'s DocumentClient (keep-alive agent): FailClosed \`acquirePeriodMs: ${SETTINGS.retryDelay}\` (no lease), FailOpen \`leaseDurationMs: ${SETTINGS.ttl}\` (uncontended scenarios only: a waiter sleeps a whole lease). dynalite keeps no counters: no command counts.`)
  md.push(`- Clients: redislock on \`redis@3\` (node_redis v3, the only client it works with); redlock 4, redis-semaphore and the raw baseline on ioredis ${require('ioredis/package.json').version}; sql-lock on sequelize 5 + mysql2; raw GET_LOCK on mysql2; advisory-lock ${require('advisory-lock/package.json').version} and raw pg_advisory_lock on pg ${require('pg/package.json').version} (advisory-lock opens a connection per lock() and holds it until unlock; raw: one connection per holder, both wait on the server); deadbolt's redislock face is given the URL.`)
  if (backends.includes('sqlite')) md.push(`- SQLite / local files (one host, no server): deadbolt on \`sqlite://<tmp>/locks.db\` with the same settings as on the servers; proper-lockfile 4.1.2: \`lock(<tmp>/proper-lockfile/<key>, {stale: ${SETTINGS.ttl}, realpath: false, retries: {forever: true, minTimeout: ${SETTINGS.retryDelay}, maxTimeout: ${SETTINGS.retryDelay}, factor: 1}})\`, a lock directory per key made with mkdir, its mtime refreshed every ${SETTINGS.ttl / 2} ms.`)
  md.push(`- 1: ${cfg.s1Warmup} warm-up pairs, then up to ${cfg.s1Pairs} pairs or ${cfg.s1MaxSeconds} s. 2: ${cfg.s2Workers} async workers, ${cfg.s2WarmupMs} ms ramp-up, ${cfg.s2Seconds} s measured, each worker cycling over ${cfg.s2KeyCycle} keys of its own. 3: ${cfg.s3Workers} workers, hold ${cfg.s3HoldMs} ms with setTimeout, ${cfg.s3Sections} sections (cap ${cfg.s3MaxSeconds} s). 4: ${cfg.s4Locks} locks, ${cfg.s4Concurrency} acquisitions in flight; "stalled" = no acquisition completed for ${cfg.stallMs / 1000} s. 5: ${cfg.s5Locks} locks, ttl ${SETTINGS.autoTtl} ms, extended every ${SETTINGS.autoEvery} ms, ${cfg.s5SettleMs} ms settle, ${cfg.s5Seconds} s measured; a tick = ${SETTINGS.autoEvery} ms.`)
  md.push(`- Environment: BENCH_RUNS=${cfg.runs} BENCH_SECONDS=${cfg.s2Seconds}${cfg.only ? ` BENCH_ONLY=${cfg.only.join(',')}` : ''} BENCH_SCENARIOS=${cfg.scenarios.join(',')}`)
  if (load) {
    md.push('')
    md.push('## Module load')
    md.push('')
    md.push(`What \`require()\` of each library (with the client it runs on) costs a fresh \`node\` process: ${cfg.loadRounds} interleaved rounds, each sample a new child (\`bench/load.js\`). deadbolt's includes loading its native addon.`)
    md.push('')
    md.push(loadTable(load))
  }
  for (const b of backends) {
    const bl = libs.filter((l) => LIBS[l].backend === b)
    md.push('')
    md.push(`## ${BACKEND_TITLES[b]}`)
    for (const s of cfg.scenarios) {
      const t = table(s, b, results, bl.filter((l) => LIBS[l].scenarios.includes(s)))
      if (!t) continue
      md.push('')
      md.push(`### ${SCENARIO_TITLES[s]}`)
      md.push('')
      md.push(t)
    }
    const rt = ratios(results, b, bl)
    if (rt) {
      md.push('')
      md.push(`### Ratios (${BACKEND_TITLES[b]}): deadbolt's median ÷ the peer's median`)
      md.push('')
      md.push('Below 1× is better for latency, CPU, heap, commands and round trips; above 1× is better for pairs/s; (≈) = within ±5 %, i.e. within the noise of this machine.')
      md.push('')
      md.push(rt)
    }
  }
  md.push('')
  fs.writeFileSync(resultsPath, md.join('\n'))
  fs.writeFileSync(path.join(__dirname, full ? 'results.json' : 'results-partial.json'), JSON.stringify({ date: new Date().toISOString(), machine: m, servers, addon: [...addonsSeen], config: { ...cfg, urls }, load, results }, null, 1))

  log('')
  for (const b of backends) {
    const rt = ratios(results, b, libs.filter((l) => LIBS[l].backend === b))
    if (rt) log(`### Ratios (${b}): deadbolt ÷ peer\n${rt}\n`)
  }
  log(`wrote ${path.relative(ROOT, resultsPath)} — total ${Math.round(elapsed)} s`)
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
