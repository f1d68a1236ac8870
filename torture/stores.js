'use strict'
// The store table: everything the scenarios need to know about one kind of store. A later
// store is one more entry here: its shared URL, how to start a throwaway server, a raw
// client to look at what deadbolt wrote (owner, lease, fencing counter, leftovers), how to
// kill deadbolt's connections, the store's fixed state budget per lock name, and what the
// README promises about restarts.

const { ThrowawayRedis, ThrowawayMysql, answers } = require('./servers')

const REDIS_URL = process.env.DEADBOLT_TEST_REDIS_URL || 'redis://127.0.0.1:6379'
const MYSQL_URL = process.env.DEADBOLT_TEST_MYSQL_URL || 'mysql://root@127.0.0.1:3306/test'

// deadbolt's Redis layout (docs/design.md, src/store/redis/keys.rs), written again here from
// the documentation so the suite checks the store as an outsider would: the lock key's value
// is `owner 0xFF token`; the fencing counter of the key's cluster slot is
// `0xFF deadbolt:fence:{tag}`, `tag` being the first base-36 string hashing to that slot.

function crc16(buf) {
  let crc = 0
  for (const b of buf) {
    crc ^= b << 8
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
  }
  return crc
}

function hashSlot(buf) {
  const open = buf.indexOf(0x7b)
  if (open >= 0) {
    const close = buf.indexOf(0x7d, open + 1)
    if (close > open + 1) return crc16(buf.subarray(open + 1, close)) % 16384
  }
  return crc16(buf) % 16384
}

let slotTags = null
function slotTag(key) {
  if (slotTags === null) {
    slotTags = new Array(16384).fill(null)
    let missing = 16384
    for (let n = 0; missing > 0; n++) {
      const tag = n.toString(36)
      const slot = hashSlot(Buffer.from(tag))
      if (slotTags[slot] === null) { slotTags[slot] = tag; missing-- }
    }
  }
  return slotTags[hashSlot(Buffer.from(key))]
}

/** The fencing counter serving `key` (shared by its cluster slot). */
function fenceKey(key) {
  return Buffer.concat([Buffer.from([0xff]), Buffer.from(`deadbolt:fence:{${slotTag(key)}}`)])
}

/** Owner and token of a lock key's value (`owner 0xFF token`, or the bare owner). */
function splitValue(buf) {
  const at = buf.lastIndexOf(0xff)
  if (at < 0) return { owner: buf.toString(), token: null }
  return { owner: buf.subarray(0, at).toString(), token: BigInt(buf.subarray(at + 1).toString()) }
}

class RedisRaw {
  constructor(url) {
    const Redis = require('ioredis')
    this.c = new Redis(url, { maxRetriesPerRequest: 2, enableOfflineQueue: true, retryStrategy: (n) => Math.min(n * 50, 500) })
    this.c.on('error', () => {})
  }

  /** { owner, remainingMs, token } of the live lease, or null. */
  async lease(key) {
    const [[, value], [, pttl]] = await this.c.multi().getBuffer(key).pttl(key).exec()
    if (value === null) return null
    const { owner, token } = splitValue(value)
    return { owner, remainingMs: Number(pttl), token }
  }

  /** The highest token issued for `key` so far: its slot's counter (≥ every token of key). */
  async token(key) {
    const v = await this.c.get(fenceKey(key))
    return v === null ? null : BigInt(v)
  }

  /**
   * Keys naming anything under `prefix` (the lock keys and their payloads): nothing may be
   * left once every lock is released. The slot counters name no lock, and are the fixed
   * budget (at most 16 384 keys).
   */
  async leftover(prefix, names) {
    void names
    const budget = new Set()
    const found = []
    let cursor = '0'
    for (let i = 0; i < 10000; i++) {
      const [next, keys] = await this.c.scan(cursor, 'MATCH', `*${prefix}*`, 'COUNT', 1000)
      found.push(...keys)
      cursor = next
      if (cursor === '0') break
    }
    return { extra: found.filter((k) => !budget.has(k)), all: found }
  }

  async cleanup(prefix) {
    const { all } = await this.leftover(prefix, [])
    if (all.length) await this.c.del(...all)
  }

  /** Cuts deadbolt's connections (every normal and pub/sub client but this one). */
  async killConnections() {
    const a = await this.c.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes')
    const b = await this.c.client('KILL', 'TYPE', 'pubsub', 'SKIPME', 'yes')
    return Number(a) + Number(b)
  }

  async close() { this.c.disconnect() }
}

class MysqlRaw {
  constructor(url, table = 'deadbolt_locks') {
    this.pool = require('mysql2/promise').createPool({ uri: url, connectionLimit: 2, connectTimeout: 2000 })
    this.table = table
  }

  async lease(key) {
    const [rows] = await this.pool.query(
      `SELECT owner, fence, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) AS rem FROM ${this.table} WHERE name = ?`, [Buffer.from(key)])
    const r = rows[0]
    if (!r || r.owner === null || Number(r.rem) <= 0) return null
    return { owner: String(r.owner), remainingMs: Number(r.rem) / 1000, token: BigInt(r.fence) }
  }

  async token(key) {
    const [rows] = await this.pool.query(`SELECT fence FROM ${this.table} WHERE name = ?`, [Buffer.from(key)])
    return rows[0] ? BigInt(rows[0].fence) : null
  }

  /** Rows under `prefix` beyond the budget (one row per lock name, free once released). */
  async leftover(prefix) {
    try {
      const [rows] = await this.pool.query(
        `SELECT name FROM ${this.table} WHERE name LIKE CONCAT(?, '%') AND owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)`, [Buffer.from(prefix)])
      return { extra: rows.map((r) => String(r.name)) }
    } catch (err) {
      if (err.code === 'ER_NO_SUCH_TABLE') return { extra: [] }
      throw err
    }
  }

  async cleanup(prefix) {
    if (this.dropOnCleanup) await this.pool.query(`DROP TABLE IF EXISTS ${this.table}`).catch(() => {})
    else await this.pool.query(`DELETE FROM ${this.table} WHERE name LIKE CONCAT(?, '%')`, [Buffer.from(prefix)]).catch(() => {})
  }

  /** KILL CONNECTION for every other client session (deadbolt's pool). */
  async killConnections() {
    const conn = await this.pool.getConnection()
    try {
      const [[{ me }]] = await conn.query('SELECT CONNECTION_ID() AS me')
      const [rows] = await conn.query("SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> ? AND COMMAND <> 'Daemon' AND USER <> 'system user'", [me])
      let n = 0
      for (const { ID } of rows) {
        try { await conn.query(`KILL CONNECTION ${Number(ID)}`); n++ } catch { /* already gone */ }
      }
      // The pool's other connection is not deadbolt's; it reconnects on demand.
      return n
    } finally {
      conn.release()
    }
  }

  async close() { await this.pool.end().catch(() => {}) }
}

/**
 * A SQLite file seen through a deadbolt client of the orchestrator's own (`list`: the live
 * leases under a prefix; a release deletes its row, so that is all a name can leave).
 */
class SqliteRaw {
  constructor(url) {
    this.url = url
    this.client = null
  }

  async locks() {
    this.client ??= await require('..').connect(this.url)
    return this.client
  }

  async leftover(prefix) {
    const held = await (await this.locks()).list(prefix, { limit: 1000 })
    return { extra: held.map((l) => l.key) }
  }

  async cleanup() {}

  async close() { await this.client?.close() }
}

const STORES = [
  {
    name: 'redis',
    url: REDIS_URL,
    port: Number(new URL(REDIS_URL).port || 6379),
    Server: ThrowawayRedis,
    raw: (url) => new RedisRaw(url),
    /**
     * On the shared server, a database of the run's own (other suites clean up `deadbolt:*`
     * in db 0 while this one runs); the scenarios still use random key prefixes.
     */
    isolate: (url) => {
      const u = new URL(url)
      u.pathname = `/${process.env.TORTURE_REDIS_DB ?? 15}`
      return { url: u.toString(), opts: {}, raw: () => new RedisRaw(u.toString()) }
    },
    /** Tokens survive a restart only with persistence. */
    restarts: [
      { id: 'no-persistence', label: 'Redis without AOF, SIGKILL', server: { aof: false }, tokensSurvive: false },
      { id: 'persistent', label: 'Redis with AOF (fsync always), SIGKILL', server: { aof: true }, tokensSurvive: true },
    ],
    /** A throwaway server is cheap: one per scenario. */
    reuseServer: false,
    /** The README promises no failed call after a restart only for MySQL's pool. */
    replacesConnectionsInCall: false,
  },
  {
    name: 'mysql',
    url: MYSQL_URL,
    port: Number(new URL(MYSQL_URL).port || 3306),
    Server: ThrowawayMysql,
    raw: (url) => new MysqlRaw(url),
    /**
     * On the shared server, a lease table of the scenario's own (connect option `table`),
     * dropped afterwards: other suites delete rows of `deadbolt_locks` while this one runs,
     * and a deleted row restarts its fencing counter.
     */
    isolate: (url, tag) => {
      const table = `deadbolt_torture_${tag}`
      return {
        url,
        opts: { table },
        raw: () => Object.assign(new MysqlRaw(url, table), { dropOnCleanup: true }),
      }
    },
    restarts: [{ id: 'persistent', label: 'MariaDB SIGKILL', server: {}, tokensSurvive: true }],
    /** A MariaDB datadir takes seconds to install: one throwaway server per run. */
    reuseServer: true,
    /** "Pooled connections that the server closed are replaced inside the same call." */
    replacesConnectionsInCall: true,
  },
  {
    name: 'sqlite',
    /** No server: each scenario makes its file in a temporary directory of its own. */
    Server: { available: () => true },
    raw: (url) => new SqliteRaw(url),
    restarts: [],
    /** Only the scenarios about the file itself; the server scenarios have no SQLite form. */
    only: ['14-sqlite-file-replaced'],
  },
]

async function sharedUp(store) { return answers(store.port) }

module.exports = { STORES, sharedUp, hashSlot, fenceKey }
