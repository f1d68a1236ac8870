'use strict'
// What the PostgreSQL store guarantees beyond the shared API suite, against real servers: the
// lease table's layout, connections that do not grow with held locks, releases that wake
// waiters in other processes through NOTIFY, and fencing tokens and pooled connections that
// survive a server restart (a throwaway server started for the purpose).

const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const { randomBytes } = require('node:crypto')
const { performance } = require('node:perf_hooks')
const path = require('node:path')
const readline = require('node:readline')
const deadbolt = require('..')
const { PG_URL, needPg, prefix } = require('./helpers')
const { ThrowawayPostgres, binDir } = require('./fixtures/postgres')

const { connect, LockAcquisitionError } = deadbolt

const run = prefix('pgspec')
let n = 0
const key = (name = 'k') => `${run}${++n}:${name}`

let raw = null
/** A plain `pg` connection to the shared server, for looking at what deadbolt did. */
async function rawPg() {
  if (raw === null) {
    const { Client } = require('pg')
    raw = new Client({ connectionString: PG_URL })
    await raw.connect()
  }
  return raw
}

after(async () => {
  await deadbolt.close()
  // Lease rows outlive their locks until purged: drop this file's rows.
  const conn = await rawPg().catch(() => null)
  if (conn !== null) {
    const upper = Buffer.from(run)
    upper[upper.length - 1]++
    await conn.query('DELETE FROM deadbolt_locks WHERE name >= $1 AND name < $2', [Buffer.from(run), upper])
    await conn.end()
  }
})

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}

/** Starts a fixture script; `line()` reads its next stdout line, `exited` its exit code. */
function child(script, args) {
  const proc = spawn(process.execPath, [path.join(__dirname, 'fixtures', script), ...args], { stdio: ['pipe', 'pipe', 'inherit'] })
  const it = readline.createInterface({ input: proc.stdout })[Symbol.asyncIterator]()
  const exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)))
  const timer = setTimeout(() => proc.kill('SIGKILL'), 60_000)
  exited.then(() => clearTimeout(timer))
  return {
    proc,
    exited,
    async line() {
      const { value, done } = await it.next()
      if (done) throw new Error(`${script} ended without output (exit ${await exited})`)
      return value
    },
    send(s) { proc.stdin.write(s + '\n') },
  }
}

test('the lease table has the documented layout and a released row stays, free, with its token', async (t) => {
  if (!(await needPg(t))) return
  const locks = await connect(PG_URL)
  try {
    const k = key()
    const lock = await locks.acquire(k)
    assert.equal(await lock.release(), true)
    const conn = await rawPg()
    const { rows: cols } = await conn.query(
      `SELECT column_name AS name, data_type AS type, is_nullable AS nullable
       FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'deadbolt_locks'
       ORDER BY ordinal_position`)
    assert.deepEqual(cols.map((c) => [c.name, c.type, c.nullable]), [
      ['name', 'bytea', 'NO'],
      ['owner', 'bytea', 'YES'],
      ['fence', 'bigint', 'NO'],
      ['expires_at', 'timestamp with time zone', 'NO'],
      ['data', 'bytea', 'YES'],
      ['waiter', 'bytea', 'YES'],
    ])
    const { rows: [seq] } = await conn.query("SELECT data_type, increment FROM information_schema.sequences WHERE sequence_name = 'deadbolt_locks_fence'")
    assert.deepEqual(seq, { data_type: 'bigint', increment: '1' })
    const { rows: [row] } = await conn.query('SELECT owner, fence, expires_at <= clock_timestamp() AS free FROM deadbolt_locks WHERE name = $1', [Buffer.from(k)])
    assert.equal(row.owner, null)
    assert.equal(BigInt(row.fence), lock.fencingToken)
    assert.equal(row.free, true)
  } finally {
    await locks.close()
  }
})

test('postgresql:// and sslmode=require reach the server', async (t) => {
  if (!(await needPg(t))) return
  const u = new URL(PG_URL)
  for (const url of [
    PG_URL.replace(/^postgres:/, 'postgresql:'),
    `postgres://${u.username}@${u.host}${u.pathname}?sslmode=require`,
  ]) {
    const locks = await connect(url)
    try {
      const lock = await locks.acquire(key('url'))
      assert.equal(await lock.release(), true, url)
    } finally {
      await locks.close()
    }
  }
})

test('an sslmode in the URL that contradicts options.tls is a TypeError, before any I/O', async () => {
  // Port 1: nothing listens there, so only a check before I/O can answer.
  for (const [query, tls] of [['sslmode=require', {}], ['sslmode=disable', { rejectUnauthorized: false }], ['sslmode=verify-full', { rejectUnauthorized: false }]]) {
    await assert.rejects(connect(`postgres://postgres@127.0.0.1:1/test?${query}`, { tls }), (err) => err instanceof TypeError && err.code === 'ERR_INVALID_ARG_VALUE' && /sslmode/.test(err.message))
  }
})

test('10 000 locks held at once by one process use no more connections than the pool size, plus none per lock', async (t) => {
  if (!(await needPg(t))) return
  // A table of its own, and an application name of its own: the server's session list tells
  // this client's connections apart whoever else uses the server meanwhile.
  const table = `deadbolt_pool_${randomBytes(4).toString('hex')}`
  const app = `deadbolt_pool_test_${process.pid}`
  const conn = await rawPg()
  const poolSize = 4
  let locks = null
  let sampling = true
  let maxSeen = 0
  const connections = async () => {
    const { rows: [row] } = await conn.query('SELECT count(*)::int AS c FROM pg_stat_activity WHERE application_name = $1', [app])
    return row.c
  }
  const sampler = (async () => {
    while (sampling) {
      maxSeen = Math.max(maxSeen, await connections())
      await new Promise((r) => setTimeout(r, 10))
    }
  })()
  try {
    locks = await connect(`${PG_URL}?application_name=${app}`, { poolSize, table, connectTimeout: 60_000 })
    const keys = Array.from({ length: 10_000 }, (_, i) => `${run}pool:${i}`)
    const held = await Promise.all(keys.map((k) => locks.acquire(k, { ttl: 120_000 })))
    assert.equal(locks.heldCount, 10_000)
    const { rows: [live] } = await conn.query(`SELECT count(*)::int AS c FROM "${table}" WHERE owner IS NOT NULL AND expires_at > clock_timestamp()`)
    assert.equal(live.c, 10_000, 'all 10 000 leases are live in the table at once')
    const now = await connections()
    sampling = false
    await sampler
    t.diagnostic(`connections: at most ${maxSeen} seen while acquiring, ${now} while holding 10 000 locks (pool size ${poolSize})`)
    assert.ok(maxSeen >= 1, 'the sampler saw the pool at work')
    assert.ok(maxSeen <= poolSize, `${maxSeen} connections for a pool of ${poolSize}`)
    assert.ok(now <= poolSize)
    const released = await Promise.all(held.map((l) => l.release()))
    assert.ok(released.every((r) => r === true))
  } finally {
    sampling = false
    await sampler
    if (locks) await locks.close()
    await conn.query(`DROP TABLE IF EXISTS "${table}"; DROP SEQUENCE IF EXISTS "${table}_fence"`)
  }
})

test('a waiter in another process is woken by the release (NOTIFY), not by its poll', async (t) => {
  if (!(await needPg(t))) return
  const k = key('notify')
  const holder = child('handoff.js', [PG_URL, k])
  const locks = await connect(PG_URL)
  try {
    assert.equal(await holder.line(), 'ready')
    holder.send('acquire')
    assert.equal(await holder.line(), 'held')
    // It asks once, is refused, and would ask again only after 60 s: only the release's
    // announcement can give it the lock before its wait of 30 s runs out.
    const waiting = locks.acquire(k, { retryDelay: 60_000, jitter: 0, wait: 30_000 })
    await new Promise((r) => setTimeout(r, 200))
    holder.send('release')
    assert.match(await holder.line(), /^released /)
    const lock = await waiting
    assert.equal((await locks.inspect(k)).owner, lock.owner)
    await lock.release()
  } finally {
    holder.proc.stdin.end()
    await locks.close()
  }
  assert.equal(await holder.exited, 0)
})

test('cross-process handoff latency with default settings (diagnostic, 50 handoffs)', async (t) => {
  if (!(await needPg(t))) return
  const k = key('handoff')
  const other = child('handoff.js', [PG_URL, k])
  const locks = await connect(PG_URL)
  const now = () => performance.timeOrigin + performance.now()
  try {
    assert.equal(await other.line(), 'ready')
    const fromCommit = []
    let last = 0n
    for (let i = 0; i < 50; i++) {
      other.send('acquire')
      assert.equal(await other.line(), 'held')
      let acquiredAt = 0
      const waiting = locks.acquire(k, { wait: 30_000 }).then((l) => { acquiredAt = now(); return l })
      await new Promise((r) => setTimeout(r, 10 + Math.floor(Math.random() * 50)))
      other.send('release')
      const [word, , releasedAt] = (await other.line()).split(' ')
      assert.equal(word, 'released')
      const lock = await waiting
      assert.ok(lock.fencingToken > last)
      last = lock.fencingToken
      fromCommit.push(acquiredAt - Number(releasedAt))
      await lock.release()
    }
    t.diagnostic(`cross-process handoff, median of 50: ${median(fromCommit).toFixed(2)} ms from the release's completion; min ${Math.min(...fromCommit).toFixed(2)}, max ${Math.max(...fromCommit).toFixed(2)}`)
  } finally {
    other.proc.stdin.end()
    await locks.close()
  }
  assert.equal(await other.exited, 0)
})

describe('a restarted server', () => {
  let pg = null
  let setupError = null
  before(async () => {
    if (!binDir()) return
    try {
      pg = await ThrowawayPostgres.create({ port: 5442 })
      await pg.start()
    } catch (err) {
      setupError = err
    }
  })
  after(async () => { if (pg) await pg.destroy() })

  /** True when the throwaway server runs; skips (or fails under CI) when PostgreSQL is absent. */
  function ready(t) {
    if (setupError) throw setupError
    if (pg) return true
    const msg = 'PostgreSQL (/usr/lib/postgresql/*/bin/pg_ctl) is not installed: cannot start a throwaway server'
    if (process.env.CI) throw new Error(msg)
    t.skip(msg)
    return false
  }

  /** Fencing tokens of `count` acquisitions of `k`, taken by a new process (a pool of its own). */
  async function tokensFromNewProcess(url, k, count) {
    const proc = child('child.js', ['fence', url, k, String(count)])
    const out = []
    for (let i = 0; i < count; i++) out.push(BigInt(await proc.line()))
    assert.equal(await proc.exited, 0)
    return out
  }

  for (const [mode, how] of [['fast', 'a clean shutdown'], ['immediate', 'a crash (immediate shutdown)']]) {
    test(`fencing tokens strictly increase across ${how} and restart of the server`, async (t) => {
      if (!ready(t)) return
      const k = key(`restart-${mode}`)
      const before = await tokensFromNewProcess(pg.url, k, 3)
      await pg.stop(mode)
      await pg.start()
      const afterRestart = await tokensFromNewProcess(pg.url, k, 3)
      t.diagnostic(`tokens before: ${before.join(', ')}; after: ${afterRestart.join(', ')}`)
      const all = [...before, ...afterRestart]
      for (let i = 1; i < all.length; i++) assert.ok(all[i] > all[i - 1], `token ${all[i]} after ${all[i - 1]}`)
    })
  }

  for (const poolSize of [1, 3]) {
    test(`the first operation after a server restart succeeds with every pooled connection stale (pool of ${poolSize})`, async (t) => {
      if (!ready(t)) return
      const locks = await connect(pg.url, { poolSize })
      try {
        const k = key(`recover-${poolSize}`)
        // Use every pooled connection, so that all of them go stale in the restart.
        const warm = await Promise.all(Array.from({ length: poolSize }, (_, i) => locks.acquire(`${k}:${i}`)))
        await Promise.all(warm.map((l) => l.release()))
        const first = await locks.acquire(k)
        await first.release()
        await pg.stop('fast')
        await pg.start()
        // Every stale connection is found dead and replaced inside this one call.
        const lock = await locks.acquire(k)
        assert.ok(lock.fencingToken > first.fencingToken)
        await lock.release()
      } finally {
        await locks.close()
      }
    })
  }

  test('after a restart, a release still wakes a waiter of another client through the reopened listener', async (t) => {
    if (!ready(t)) return
    // Two clients with different options have separate stores (and pools), so a release by
    // one reaches the other only through the server.
    const holder = await connect(pg.url, { poolSize: 2 })
    const waiterClient = await connect(pg.url, { poolSize: 3 })
    try {
      const k = key('relisten')
      // The waiter's store starts listening (a first wait), then the server restarts.
      const first = await holder.acquire(k)
      const early = waiterClient.acquire(k, { retryDelay: 60_000, jitter: 0, wait: 30_000 })
      await new Promise((r) => setTimeout(r, 200))
      await first.release()
      await (await early).release()
      await pg.stop('fast')
      await pg.start()
      const second = await holder.acquire(k)
      // Refused once, then only an announcement can hand it over before the wait runs out.
      const waiting = waiterClient.acquire(k, { retryDelay: 60_000, jitter: 0, wait: 30_000 })
      await new Promise((r) => setTimeout(r, 500))
      await second.release()
      const lock = await waiting
      assert.ok(lock.fencingToken > second.fencingToken)
      await lock.release()
    } finally {
      await holder.close()
      await waiterClient.close()
    }
  })

  test('a Unix socket URL reaches the server, in both forms (?host= and an encoded path as the host)', async (t) => {
    if (!ready(t)) return
    // The throwaway server's socket directory; its local connections are trusted.
    for (const url of [`postgres:///postgres?host=${pg.dir}&user=postgres&port=${pg.port}`, `postgres://postgres@${encodeURIComponent(pg.dir)}:${pg.port}/postgres`]) {
      const locks = await connect(url)
      try {
        const lock = await locks.acquire(key('socket'))
        assert.equal(await lock.release(), true, url)
      } finally {
        await locks.close()
      }
    }
  })

  test('a waiter whose wait is shorter than its poll gives up when nobody releases (the control of the tests above)', async (t) => {
    if (!ready(t)) return
    const locks = await connect(pg.url)
    try {
      const k = key('control')
      const held = await locks.acquire(k)
      const other = await connect(pg.url, { poolSize: 2 })
      try {
        await assert.rejects(other.acquire(k, { retryDelay: 60_000, jitter: 0, wait: 1_000 }), LockAcquisitionError)
      } finally {
        await other.close()
      }
      await held.release()
    } finally {
      await locks.close()
    }
  })
})
