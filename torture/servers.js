'use strict'
// Throwaway store servers on free loopback ports, owned by the run: a redis-server child
// (with or without AOF) and a MariaDB (the test fixture's own datadir and port). Both can be
// paused (SIGSTOP), resumed, killed with SIGKILL and restarted on the same port and data.
// Every child is killed when the orchestrator exits, however it exits.

const { spawn, execFileSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const net = require('node:net')
const { ThrowawayMariadb, binaries: mariadbBinaries } = require('../__test__/fixtures/mariadb')

const live = new Set()
process.on('exit', () => {
  for (const child of live) {
    try { child.kill('SIGCONT'); child.kill('SIGKILL') } catch {}
  }
})

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

function answers(port, host = '127.0.0.1') {
  return new Promise((resolve) => {
    const s = net.connect({ port, host })
    s.once('connect', () => { s.destroy(); resolve(true) })
    s.once('error', () => resolve(false))
    s.setTimeout(1000, () => { s.destroy(); resolve(false) })
  })
}

function which(cmd) {
  try {
    return execFileSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' }).trim() || null
  } catch {
    return null
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

/** True when every thread of process `pid` is stopped (state T in /proc). */
function allThreadsStopped(pid) {
  try {
    const tasks = fs.readdirSync(`/proc/${pid}/task`)
    return tasks.every((t) => {
      const stat = fs.readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8')
      return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'T'
    })
  } catch {
    return false
  }
}

/** SIGSTOPs `pid` and resolves once the kernel shows all its threads stopped (bounded). */
async function stopProcess(pid) {
  process.kill(pid, 'SIGSTOP')
  for (let i = 0; i < 400 && !allThreadsStopped(pid); i++) await sleep(5)
}

/** A redis-server child on a free port, in a temporary directory (its AOF lives there). */
class ThrowawayRedis {
  static available() { return which('redis-server') !== null }

  /**
   * `extra`: further arguments (or `extra(r)`, given the server once its port and directory
   * are known); `env`: extra environment variables of the server process; `port`: a function
   * that picks the port (a free one by default).
   */
  static async create({ aof = false, extra = [], env = null, port = freePort } = {}) {
    const r = new ThrowawayRedis(aof)
    r.env = env
    r.port = await port()
    r.extra = typeof extra === 'function' ? extra(r) : extra
    await r.start()
    return r
  }

  constructor(aof) {
    this.aof = aof
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-torture-redis-'))
    this.child = null
    this.port = 0
    this.extra = []
    this.env = null
  }

  get url() { return `redis://127.0.0.1:${this.port}` }
  get pid() { return this.child?.pid }

  async start({ timeout = 15000 } = {}) {
    const args = ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--dir', this.dir,
      '--daemonize', 'no', '--protected-mode', 'no', '--appendonly', this.aof ? 'yes' : 'no']
    // fsync every write: a SIGKILL then loses nothing, which is what "tokens survive a restart
    // with AOF" needs (the default everysec may lose the last second).
    if (this.aof) args.push('--appendfsync', 'always')
    args.push(...this.extra)
    const child = spawn('redis-server', args, { stdio: 'ignore', cwd: this.dir, env: this.env ? { ...process.env, ...this.env } : process.env })
    this.child = child
    live.add(child)
    this.exited = new Promise((resolve) => child.once('exit', () => { live.delete(child); if (this.child === child) this.child = null; resolve() }))
    const end = Date.now() + timeout
    for (let i = 0; i < 1000; i++) {
      if (await this.ping()) return
      if (this.child !== child) throw new Error('redis-server exited during start-up')
      if (Date.now() > end) throw new Error('redis-server did not answer')
      await sleep(20)
    }
  }

  async ping() {
    const Redis = require('ioredis')
    const c = new Redis({ port: this.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 500 })
    c.on('error', () => {})
    try {
      await c.connect()
      // With AOF the server answers LOADING until it has replayed the file.
      return (await c.ping()) === 'PONG'
    } catch {
      return false
    } finally {
      c.disconnect()
    }
  }

  /** SIGSTOP; resolves once the server is really stopped. */
  async pause() { if (this.child) await stopProcess(this.child.pid) }
  resume() { this.child?.kill('SIGCONT') }

  async stop(signal = 'SIGKILL') {
    const child = this.child
    if (!child) return
    child.kill('SIGCONT')
    child.kill(signal)
    await this.exited
  }

  async restart(signal = 'SIGKILL') {
    await this.stop(signal)
    await this.start()
  }

  /** Resumes it, and starts it again if it is not running. */
  async ensureRunning() {
    this.resume()
    if (!this.child) await this.start()
  }

  async destroy() {
    await this.stop('SIGKILL').catch(() => {})
    fs.rmSync(this.dir, { recursive: true, force: true })
  }
}

/** The test fixture's MariaDB, with pause/resume/restart in the same shape as ThrowawayRedis. */
class ThrowawayMysql {
  static available() { return mariadbBinaries() !== null }

  /** `env`: extra environment variables of the server process. */
  static async create({ env = null } = {}) {
    const db = await ThrowawayMariadb.create({ port: 3407 + Math.floor(Math.random() * 400), env })
    await db.start({ timeout: 60000 })
    const m = new ThrowawayMysql(db)
    return m
  }

  constructor(db) { this.db = db }
  get url() { return this.db.url }
  get port() { return this.db.port }
  get pid() { return this.db.child?.pid }
  async pause() { if (this.db.child) await stopProcess(this.db.child.pid) }
  resume() { this.db.child?.kill('SIGCONT') }
  async stop(signal = 'SIGKILL') {
    this.db.child?.kill('SIGCONT')
    await this.db.stop(signal)
  }

  async restart(signal = 'SIGKILL') {
    await this.stop(signal)
    await this.db.start({ timeout: 60000 })
  }

  async ensureRunning() {
    this.resume()
    if (!this.pid) await this.db.start({ timeout: 60000 })
  }

  async destroy() {
    this.db.child?.kill('SIGCONT')
    await this.db.destroy()
  }
}

/**
 * Writes the configuration of a throwaway sentinel on `port` into `dir`, monitoring the primary
 * on `primaryPort` as "mymaster" (quorum 2, down after 1 s, failover timeout 3 s); returns
 * its path, for `redis-server <path> --sentinel`.
 */
function writeSentinelConf(dir, port, primaryPort) {
  const conf = path.join(dir, `sentinel-${port}.conf`)
  fs.writeFileSync(conf, [
    `port ${port}`, 'bind 127.0.0.1', `dir ${dir}`,
    `sentinel monitor mymaster 127.0.0.1 ${primaryPort} 2`,
    'sentinel down-after-milliseconds mymaster 1000',
    'sentinel failover-timeout mymaster 3000',
    'sentinel parallel-syncs mymaster 1', '',
  ].join('\n'))
  return conf
}

module.exports = { ThrowawayRedis, ThrowawayMysql, freePort, answers, sleep, stopProcess, writeSentinelConf }
