'use strict'
// Server-side measurements, taken over a connection of the probe's own (never the library's).
// Redis: INFO commandstats/stats/cpu/memory and CLIENT LIST. MySQL/MariaDB: SHOW GLOBAL STATUS,
// information_schema.PROCESSLIST, and the server process's CPU from /proc when it is local.
// PostgreSQL: pg_stat_activity, and the CPU of the postmaster and its children (one backend
// process per connection) from /proc when it is local.
// SQLite and lock files: no server, nothing to ask (FileProbe).

const fs = require('node:fs')

// ───────────────────────────── Redis ─────────────────────────────

class RedisProbe {
  constructor(url) {
    const Redis = require('ioredis')
    this.client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, enableOfflineQueue: true })
  }

  async open() {
    await this.client.connect()
    await this.client.ping()
  }

  /**
   * One INFO call (so one command and one read of our own between two snapshots, which
   * `diff` subtracts). `calls` sums every cmdstat, script-internal calls included (Redis 7
   * counts commands a Lua script runs as calls of those commands).
   */
  async snapshot() {
    const text = await this.client.info('commandstats', 'stats', 'cpu', 'memory')
    const byCmd = {}
    let calls = 0
    for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
      byCmd[m[1]] = Number(m[2])
      calls += Number(m[2])
    }
    const num = (name) => {
      const m = new RegExp(`^${name}:([0-9.]+)`, 'm').exec(text)
      return m ? Number(m[1]) : NaN
    }
    return {
      calls,
      byCmd,
      reads: num('total_reads_processed'),
      cpu: num('used_cpu_user') + num('used_cpu_sys'),
      usedMemory: num('used_memory'),
      at: performance.now(),
    }
  }

  /** What happened between two snapshots, minus the probe's own INFO call. */
  diff(a, b) {
    const byCmd = {}
    for (const k of Object.keys(b.byCmd)) {
      const d = b.byCmd[k] - (a.byCmd[k] || 0)
      if (d) byCmd[k] = d
    }
    if (byCmd.info) byCmd.info -= 1
    if (!byCmd.info) delete byCmd.info
    const scripts = (byCmd.evalsha || 0) + (byCmd.eval || 0) + (byCmd.evalsha_ro || 0) + (byCmd.eval_ro || 0) + (byCmd.fcall || 0) + (byCmd.fcall_ro || 0)
    return {
      calls: b.calls - a.calls - 1,
      reads: b.reads - a.reads - 1,
      scripts,
      byCmd,
      cpuMicros: (b.cpu - a.cpu) * 1e6,
      memory: b.usedMemory - a.usedMemory,
      ms: b.at - a.at,
    }
  }

  /** Connections open on the server, this probe's included. */
  async connections() {
    const list = await this.client.client('LIST')
    return list.split('\n').filter((l) => l.trim() !== '').length
  }

  async usedMemory() {
    const text = await this.client.info('memory')
    return Number(/^used_memory:(\d+)/m.exec(text)[1])
  }

  /** Values of many keys, in one pipeline. */
  /**
   * The owner stored under each key: the value, less deadbolt's `0xFF <fencing token>` suffix
   * (the modern API keeps the holder's token in the value, and its tokenless value ends at the
   * 0xFF; the redislock face's is the bare owner, and no other library writes 0xFF).
   */
  async values(keys) {
    const out = []
    for (let i = 0; i < keys.length; i += 1000) {
      const pipe = this.client.pipeline()
      for (const k of keys.slice(i, i + 1000)) pipe.getBuffer(k)
      for (const [err, v] of await pipe.exec()) {
        if (err || v === null) { out.push(null); continue }
        const at = v.lastIndexOf(0xff)
        out.push((at < 0 ? v : v.subarray(0, at)).toString())
      }
    }
    return out
  }

  /** Deletes every key matching `pattern` (SCAN + UNLINK). Returns how many. */
  async cleanup(pattern) {
    let cursor = '0'
    let n = 0
    do {
      const [next, keys] = await this.client.scan(cursor, 'MATCH', pattern, 'COUNT', 1000)
      cursor = next
      if (keys.length) n += await this.client.unlink(...keys)
    } while (cursor !== '0')
    return n
  }

  async info(section) {
    return this.client.info(section)
  }

  async close() {
    this.client.disconnect()
  }
}

// ───────────────────────────── MySQL / MariaDB ─────────────────────────────

/** utime+stime of the local mysqld/mariadbd process, in µs; NaN if it is not found. */
function localProcessCpu(names, pid) {
  try {
    if (pid) localProcessCpu.pid = String(pid)
    if (localProcessCpu.pid === undefined) {
      localProcessCpu.pid = null
      for (const d of fs.readdirSync('/proc')) {
        if (!/^\d+$/.test(d)) continue
        try {
          const comm = fs.readFileSync(`/proc/${d}/comm`, 'utf8').trim()
          if (names.includes(comm)) {
            localProcessCpu.pid = d
            break
          }
        } catch {}
      }
    }
    if (!localProcessCpu.pid) return NaN
    const stat = fs.readFileSync(`/proc/${localProcessCpu.pid}/stat`, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    // fields[11], fields[12] are utime and stime (fields 14 and 15 of stat), in clock ticks.
    return ((Number(fields[11]) + Number(fields[12])) / 100) * 1e6
  } catch {
    return NaN
  }
}

class MysqlProbe {
  /** `pid`: the server's process id when known (a private instance), else found by name. */
  constructor(url, pid) {
    this.url = url
    this.pid = pid
    this.local = /@(127\.0\.0\.1|localhost|\[::1\])[:/]/.test(url)
  }

  async open() {
    const mysql = require('mysql2/promise')
    this.conn = await mysql.createConnection(this.url)
  }

  /** One SHOW (one question of our own between two snapshots, subtracted by `diff`). */
  async snapshot() {
    const [rows] = await this.conn.query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_commit', 'Com_rollback')")
    const s = {}
    for (const r of rows) s[r.Variable_name] = Number(r.Value)
    return {
      questions: s.Questions,
      commits: s.Com_commit,
      cpu: this.local ? localProcessCpu(['mariadbd', 'mysqld'], this.pid) : NaN,
      at: performance.now(),
    }
  }

  diff(a, b) {
    return {
      questions: b.questions - a.questions - 1,
      commits: b.commits - a.commits,
      cpuMicros: b.cpu - a.cpu,
      ms: b.at - a.at,
    }
  }

  async connections() {
    const [[row]] = await this.conn.query('SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST')
    return Number(row.n)
  }

  async variable(name) {
    const [[row]] = await this.conn.query('SHOW VARIABLES LIKE ?', [name])
    return row ? row.Value : undefined
  }

  async query(sql, args) {
    const [rows] = await this.conn.query(sql, args)
    return rows
  }

  async close() {
    await this.conn.end().catch(() => {})
  }
}

// ───────────────────────────── DynamoDB (dynalite) ─────────────────────────────

/** The CPU of a local dynalite process (it keeps no counters) and its open connections. */
class DynaliteProbe {
  /** `pid`: the server's process (a private instance); `port`: where it listens. */
  constructor(pid, port) {
    this.pid = pid
    this.port = port
  }

  async open() {}

  snapshot() {
    return { cpu: this.pid ? localProcessCpu([], this.pid) : NaN, at: performance.now() }
  }

  diff(a, b) {
    return { cpuMicros: b.cpu - a.cpu, ms: b.at - a.at }
  }

  /** Established TCP connections to the server's port (from /proc/net/tcp*). */
  async connections() {
    let n = 0
    for (const f of ['/proc/net/tcp', '/proc/net/tcp6']) {
      try {
        for (const line of fs.readFileSync(f, 'utf8').split('\n').slice(1)) {
          const cols = line.trim().split(/\s+/)
          if (cols.length < 4) continue
          const localPort = parseInt(cols[1].split(':')[1], 16)
          if (localPort === this.port && cols[3] === '01') n++
        }
      } catch {}
    }
    return n
  }

  async close() {}
}

// ───────────────────────────── local files (SQLite, lock files) ─────────────────────────────

/**
 * The SQLite and lock-file peers have no server: nothing to count beyond the client
 * process, which the worker measures itself.
 */
class FileProbe {
  async open() {}
  async snapshot() {
    return {}
  }

  diff() {
    return { cpuMicros: NaN }
  }

  async connections() {
    return NaN
  }

  async close() {}
}

// ───────────────────────────── PostgreSQL ─────────────────────────────

/** utime+stime of a process and its live children, in µs; NaN if it is not found. */
function processTreeCpu(pid) {
  const cpuOf = (stat) => {
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    // fields[1] is the parent pid; fields[11], fields[12] utime and stime, in clock ticks.
    return { ppid: fields[1], ticks: Number(fields[11]) + Number(fields[12]) }
  }
  try {
    let ticks = cpuOf(fs.readFileSync(`/proc/${pid}/stat`, 'utf8')).ticks
    for (const d of fs.readdirSync('/proc')) {
      if (!/^\d+$/.test(d)) continue
      try {
        const c = cpuOf(fs.readFileSync(`/proc/${d}/stat`, 'utf8'))
        if (c.ppid === String(pid)) ticks += c.ticks
      } catch {}
    }
    return (ticks / 100) * 1e6
  } catch {
    return NaN
  }
}

class PgProbe {
  /**
   * `pid`: the postmaster's process id when known (a private instance). Server CPU counts the
   * backends alive at each snapshot: a connection closed in between takes its CPU with it.
   */
  constructor(url, pid) {
    this.url = url
    this.pid = pid
  }

  async open() {
    const { Client } = require('pg')
    this.conn = new Client({ connectionString: this.url })
    await this.conn.connect()
  }

  async snapshot() {
    return { cpu: this.pid ? processTreeCpu(this.pid) : NaN, at: performance.now() }
  }

  diff(a, b) {
    return { cpuMicros: b.cpu - a.cpu, ms: b.at - a.at }
  }

  async connections() {
    const { rows: [row] } = await this.conn.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE backend_type = 'client backend'")
    return row.n
  }

  async variable(name) {
    const { rows: [row] } = await this.conn.query('SELECT current_setting($1) AS v', [name])
    return row ? row.v : undefined
  }

  /** Live deadbolt leases whose names start with `prefix`. */
  async liveDeadboltLocks(prefix) {
    const upper = Buffer.from(prefix)
    upper[upper.length - 1]++
    const { rows: [row] } = await this.conn.query(
      'SELECT count(*)::int AS n FROM deadbolt_locks WHERE name >= $1 AND name < $2 AND owner IS NOT NULL AND expires_at > clock_timestamp()',
      [Buffer.from(prefix), upper])
    return row.n
  }

  async close() {
    await this.conn.end().catch(() => {})
  }
}

module.exports = { RedisProbe, MysqlProbe, PgProbe, FileProbe, DynaliteProbe }
