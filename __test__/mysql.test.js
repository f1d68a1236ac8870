'use strict'
// What the MySQL/MariaDB store guarantees beyond the shared API suite, against real servers:
// connections do not grow with held locks, fencing tokens survive a server restart, a
// stalled holder cannot stretch its lease, and how fast a lock changes hands.

const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const { randomBytes } = require('node:crypto')
const { performance } = require('node:perf_hooks')
const path = require('node:path')
const readline = require('node:readline')
const deadbolt = require('..')
const { MYSQL_URL, eventually, needMysql, prefix, sleep } = require('./helpers')
const { ThrowawayMariadb, binaries } = require('./fixtures/mariadb')

const { connect } = deadbolt

const run = prefix('mysqlspec')
let n = 0
const key = (name = 'k') => `${run}${++n}:${name}`

let raw = null
/** A plain mysql2 connection to the shared server, for looking at what deadbolt did. */
async function rawMysql() {
  if (raw === null) raw = await require('mysql2/promise').createConnection(MYSQL_URL)
  return raw
}

after(async () => {
  await deadbolt.close()
  // Lease rows outlive their locks (they keep the fencing counter): drop this file's rows.
  const conn = await rawMysql().catch(() => null)
  if (conn !== null) {
    await conn.query("DELETE FROM deadbolt_locks WHERE name LIKE CONCAT(?, '%')", [Buffer.from(run)])
    await conn.end()
  }
})

function urlWithDatabase(url, db) {
  const u = new URL(url)
  u.pathname = `/${db}`
  return u.toString()
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}

/** Starts a fixture script; `lines` yields its stdout lines, `exited` its exit code. */
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

test('the lease table has the documented schema and a released row keeps its fencing counter', async (t) => {
  if (!(await needMysql(t))) return
  const locks = await connect(MYSQL_URL)
  try {
    const k = key()
    const lock = await locks.acquire(k)
    assert.equal(await lock.release(), true)
    const conn = await rawMysql()
    const [cols] = await conn.query(
      `SELECT COLUMN_NAME AS name, COLUMN_TYPE AS type, IS_NULLABLE AS nullable, COLUMN_KEY AS k
       FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'deadbolt_locks'
       ORDER BY ORDINAL_POSITION`)
    assert.deepEqual(cols.map((c) => [c.name, c.type, c.nullable, c.k]), [
      ['name', 'varbinary(1024)', 'NO', 'PRI'],
      ['owner', 'varbinary(255)', 'YES', ''],
      ['fence', 'bigint(20) unsigned', 'NO', ''],
      ['expires_at', 'datetime(6)', 'NO', ''],
      ['data', 'longblob', 'YES', ''],
    ])
    const [[row]] = await conn.query('SELECT owner, fence, expires_at <= UTC_TIMESTAMP(6) AS free FROM deadbolt_locks WHERE name = ?', [Buffer.from(k)])
    assert.equal(row.owner, null)
    assert.equal(BigInt(row.fence), lock.fencingToken)
    assert.equal(row.free, 1)
  } finally {
    await locks.close()
  }
})

test('10 000 locks held at once by one process use no more connections than the pool size', async (t) => {
  if (!(await needMysql(t))) return
  // A database of its own: the server's process list tells its connections apart by DB,
  // whoever else uses the server meanwhile, and dropping it removes the 10 000 rows.
  const db = `deadbolt_pool_${randomBytes(4).toString('hex')}`
  const conn = await rawMysql()
  await conn.query(`CREATE DATABASE \`${db}\``)
  const poolSize = 4
  let locks = null
  let sampling = true
  let maxSeen = 0
  const connections = async () => {
    const [[row]] = await conn.query('SELECT COUNT(*) AS c FROM information_schema.PROCESSLIST WHERE DB = ?', [db])
    return Number(row.c)
  }
  const sampler = (async () => {
    while (sampling) {
      maxSeen = Math.max(maxSeen, await connections())
      await sleep(10)
    }
  })()
  try {
    locks = await connect(urlWithDatabase(MYSQL_URL, db), { poolSize, connectTimeout: 60_000 })
    const keys = Array.from({ length: 10_000 }, (_, i) => `${run}pool:${i}`)
    const held = await Promise.all(keys.map((k) => locks.acquire(k, { ttl: 120_000 })))
    assert.equal(locks.heldCount, 10_000)
    const [[live]] = await conn.query(`SELECT COUNT(*) AS c FROM \`${db}\`.deadbolt_locks WHERE owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)`)
    assert.equal(Number(live.c), 10_000, 'all 10 000 leases are live in the table at once')
    const now = await connections()
    sampling = false
    await sampler
    t.diagnostic(`connections: at most ${maxSeen} seen while acquiring, ${now} while holding 10 000 locks (pool size ${poolSize})`)
    assert.ok(maxSeen >= 1, 'the sampler saw the pool at work')
    assert.ok(maxSeen <= poolSize, `${maxSeen} connections for a pool of ${poolSize}`)
    assert.ok(now <= poolSize)
    const released = await Promise.all(held.map((l) => l.release()))
    assert.ok(released.every((r) => r === true))
    const [[after]] = await conn.query(`SELECT COUNT(*) AS c FROM \`${db}\`.deadbolt_locks WHERE owner IS NOT NULL`)
    assert.equal(Number(after.c), 0)
  } finally {
    sampling = false
    await sampler
    if (locks) await locks.close()
    await conn.query(`DROP DATABASE IF EXISTS \`${db}\``)
  }
})

describe('a restarted server', () => {
  let db = null
  let setupError = null
  before(async () => {
    if (!binaries()) return
    try {
      db = await ThrowawayMariadb.create({ port: 3407 })
      await db.start()
    } catch (err) {
      setupError = err
    }
  })
  after(async () => { if (db) await db.destroy() })

  /** True when the throwaway server runs; skips (or fails under CI) when MariaDB is absent. */
  function ready(t) {
    if (setupError) throw setupError
    if (db) return true
    const msg = 'mariadbd / mariadb-install-db are not installed: cannot start a throwaway server'
    if (process.env.CI) throw new Error(msg)
    t.skip(msg)
    return false
  }

  /**
   * Fencing tokens of `count` acquisitions of `k`, taken by a new process: a client with a
   * pool of its own. (Clients of one process share the pool of a URL, so a new client in this
   * process would not be a reconnection.)
   */
  async function tokensFromNewProcess(url, k, count) {
    const proc = child('child.js', ['fence', url, k, String(count)])
    const out = []
    for (let i = 0; i < count; i++) out.push(BigInt(await proc.line()))
    assert.equal(await proc.exited, 0)
    return out
  }

  for (const [signal, how] of [['SIGTERM', 'a clean shutdown'], ['SIGKILL', 'a crash (SIGKILL)']]) {
    test(`fencing tokens strictly increase across ${how} and restart of the server`, async (t) => {
      if (!ready(t)) return
      const k = key('restart')
      const before = await tokensFromNewProcess(db.url, k, 3)
      await db.stop(signal)
      await db.start()
      const afterRestart = await tokensFromNewProcess(db.url, k, 3)
      t.diagnostic(`tokens before: ${before.join(', ')}; after: ${afterRestart.join(', ')}`)
      const all = [...before, ...afterRestart]
      for (let i = 1; i < all.length; i++) assert.ok(all[i] > all[i - 1], `token ${all[i]} after ${all[i - 1]}`)
    })
  }

  for (const poolSize of [1, 3]) {
    test(`the first operation after a server restart succeeds with every pooled connection stale (pool of ${poolSize})`, async (t) => {
      if (!ready(t)) return
      const locks = await connect(db.url, { poolSize })
      try {
        const k = key(`recover-${poolSize}`)
        // Use every pooled connection, so that all of them go stale in the restart.
        const warm = await Promise.all(Array.from({ length: poolSize }, (_, i) => locks.acquire(`${k}:${i}`)))
        await Promise.all(warm.map((l) => l.release()))
        const first = await locks.acquire(k)
        await first.release()
        await db.stop('SIGTERM')
        await db.start()
        // Every stale connection is found dead and replaced inside this one call.
        const lock = await locks.acquire(k)
        assert.ok(lock.fencingToken > first.fencingToken)
        await lock.release()
      } finally {
        await locks.close()
      }
    })
  }
})

for (const mode of ['modern', 'sqllock']) {
  const what = mode === 'modern' ? 'acquire (modern API)' : 'getLock (sql-lock face)'
  test(`a holder whose event loop is stalled does not keep its lease past the ttl: ${what}`, async (t) => {
    if (!(await needMysql(t))) return
    const k = key(`stall-${mode}`)
    const ttl = 500
    const stall = 2000
    const holder = child('stall.js', [mode, MYSQL_URL, k, String(ttl), String(stall)])
    let release = async () => {}
    try {
      const held = JSON.parse(await holder.line())
      assert.equal(held.event, 'held')
      // close() releases what the waiter took, also when an assertion below fails.
      if (mode === 'modern') {
        const locks = await connect(MYSQL_URL)
        release = () => locks.close()
        await locks.acquire(k, { wait: 10_000 })
      } else {
        await deadbolt.initialize(MYSQL_URL)
        release = () => deadbolt.close()
        await deadbolt.getLock(k)
      }
      const acquiredAt = Date.now()
      const stalled = JSON.parse(await holder.line())
      assert.equal(stalled.event, 'stalled')
      t.diagnostic(`taken over ${acquiredAt - held.t0} ms after the holder asked for a ${ttl} ms lease; the holder's loop ended ${stalled.end - acquiredAt} ms later`)
      // Not before the lease could have ended (it began after t0)...
      assert.ok(acquiredAt >= held.t0 + ttl - 1, `taken ${acquiredAt - held.t0} ms after t0`)
      // ...and while the holder's event loop was still stuck.
      assert.ok(acquiredAt < stalled.end, `taken ${acquiredAt - stalled.end} ms after the holder's loop ended`)
      const done = JSON.parse(await holder.line())
      assert.equal(done.event, 'done')
      // (Its loss notification may come after that answer: release() ran first.)
      if (mode === 'modern') assert.equal(done.released, false, 'the stalled holder learns that its lock was gone')
      assert.equal(await holder.exited, 0)
    } finally {
      holder.proc.kill('SIGKILL')
      await release()
    }
  })
}

test('a waiter in the same process is woken by the release, not by its 2 s poll', async (t) => {
  if (!(await needMysql(t))) return
  const locks = await connect(MYSQL_URL)
  try {
    const k = key('wake')
    const first = await locks.acquire(k)
    let acquiredAt = 0
    const waiting = locks.acquire(k, { retryDelay: 2000, jitter: 0, wait: 10_000 }).then((l) => { acquiredAt = Date.now(); return l })
    // The waiter has asked once and now sleeps for 2 s.
    await sleep(200)
    assert.equal(acquiredAt, 0)
    const releasedAt = Date.now()
    await first.release()
    const second = await waiting
    t.diagnostic(`same-process handoff: ${acquiredAt - releasedAt} ms`)
    assert.ok(acquiredAt - releasedAt < 1000, `handed over after ${acquiredAt - releasedAt} ms`)
    assert.ok(second.fencingToken > first.fencingToken)
    await second.release()
  } finally {
    await locks.close()
  }
})

test('cross-process handoff latency with default settings (diagnostic, 50 handoffs)', async (t) => {
  if (!(await needMysql(t))) return
  const k = key('handoff')
  const other = child('handoff.js', [MYSQL_URL, k])
  const locks = await connect(MYSQL_URL)
  const now = () => performance.timeOrigin + performance.now()
  try {
    assert.equal(await other.line(), 'ready')
    const fromCommit = []
    const fromCall = []
    let last = 0n
    for (let i = 0; i < 50; i++) {
      other.send('acquire')
      assert.equal(await other.line(), 'held')
      let acquiredAt = 0
      const waiting = locks.acquire(k, { wait: 30_000 }).then((l) => { acquiredAt = now(); return l })
      // Release at a random point of the waiter's poll cycle.
      await sleep(10 + Math.floor(Math.random() * 50))
      other.send('release')
      const [word, before, after] = (await other.line()).split(' ')
      assert.equal(word, 'released')
      const lock = await waiting
      assert.ok(lock.fencingToken > last)
      last = lock.fencingToken
      fromCommit.push(acquiredAt - Number(after))
      fromCall.push(acquiredAt - Number(before))
      await lock.release()
    }
    const fmt = (ms) => `${ms.toFixed(1)} ms`
    t.diagnostic(`cross-process handoff, median of 50: ${fmt(median(fromCommit))} from the release's completion (${fmt(median(fromCall))} from the release call); min ${fmt(Math.min(...fromCommit))}, max ${fmt(Math.max(...fromCommit))}`)
  } finally {
    other.proc.stdin.end()
    await locks.close()
    const code = await other.exited
    assert.equal(code, 0)
  }
})

/**
 * Runs `fn({ held, other, doorbellSessions })` with `names` held here in a table of the test's
 * own (so every doorbell statement on it is the waiter's) and a process waiting for all of
 * them (`mysql-waiter.js`, its own poll an hour away) that has said `waiting`.
 * `doorbellSessions()` reads the ids of the sessions running the doorbell's statement now.
 * Kills the waiter and drops the table afterwards.
 */
async function withDoorbellWaiter(names, fn) {
  const table = `deadbolt_bell_${randomBytes(6).toString('hex')}`
  const locks = await connect(MYSQL_URL, { table })
  const held = await Promise.all(names.map((k) => locks.acquire(k)))
  const other = child('mysql-waiter.js', [MYSQL_URL, table, names.join(',')])
  const conn = await rawMysql()
  const doorbellSessions = async () => {
    const [rows] = await conn.query('SELECT ID AS id FROM information_schema.PROCESSLIST WHERE INFO LIKE ?', [`SELECT name FROM \`${table}\`%`])
    return rows.map((r) => String(r.id))
  }
  try {
    assert.equal(await other.line(), 'waiting')
    await fn({ held, other, doorbellSessions })
    other.send('done')
    assert.equal(await other.exited, 0)
  } finally {
    other.proc.kill('SIGKILL')
    await locks.close()
    await conn.query(`DROP TABLE IF EXISTS \`${table}\``)
  }
}

test('a waiter in another process whose own poll is an hour away is woken by the release', async (t) => {
  if (!(await needMysql(t))) return
  await withDoorbellWaiter([key('bell')], async ({ held: [held], other, doorbellSessions }) => {
    // The waiter asked once more when it started listening, and is refused; its doorbell
    // looks at the lease row on its one connection. Only then is the lock released, so that
    // nothing but the doorbell (the poll being an hour away) can tell the waiter.
    await eventually(async () => (await doorbellSessions()).length > 0, 30_000, 'the waiter\'s doorbell to look')
    assert.equal(await held.release(), true)
    const [word, token] = (await other.line()).split(' ')
    assert.equal(word, 'granted')
    assert.ok(BigInt(token) > held.fencingToken)
  })
})

test('a process waiting for five locks held elsewhere looks at them on one connection', async (t) => {
  if (!(await needMysql(t))) return
  const names = Array.from({ length: 5 }, (_, i) => key(`bells${i}`))
  await withDoorbellWaiter(names, async ({ held, other, doorbellSessions }) => {
    // The sessions seen running the doorbell's statement, over 20 sightings of it.
    const ids = new Set()
    let seen = 0
    await eventually(async () => {
      const now = await doorbellSessions()
      for (const id of now) ids.add(id)
      seen += now.length
      return seen >= 20
    }, 30_000, 'the doorbell to be seen 20 times')
    assert.equal(ids.size, 1, `the doorbell ran on ${ids.size} sessions for 5 names`)
    for (const h of held) assert.equal(await h.release(), true)
    for (let i = 0; i < names.length; i++) assert.match(await other.line(), /^granted \d+$/)
  })
})

test('a process that no longer waits for anything closes its doorbell connection while its client stays open', async (t) => {
  if (!(await needMysql(t))) return
  await withDoorbellWaiter([key('bell-idle')], async ({ held: [held], other, doorbellSessions }) => {
    const ids = await eventually(async () => {
      const now = await doorbellSessions()
      return now.length > 0 && now
    }, 30_000, 'the waiter\'s doorbell to look')
    assert.equal(ids.length, 1)
    const [bell] = ids
    // The waiter is granted the lock: it watches no name any more, and keeps its client (and
    // the lock) open until told `done`, so only the doorbell's own idle close can end the
    // session (IDLE_CLOSE in src/store/mysql/doorbell.rs). The bound only turns a close that
    // never comes into a failure.
    assert.equal(await held.release(), true)
    assert.match(await other.line(), /^granted \d+$/)
    const conn = await rawMysql()
    await eventually(async () => {
      const [rows] = await conn.query('SELECT ID FROM information_schema.PROCESSLIST WHERE ID = ?', [bell])
      return rows.length === 0
    }, 60_000, `the doorbell's session ${bell} to be closed`)
    assert.equal(other.proc.exitCode, null, 'the waiter is still running')
  })
})

test('connecting to a MySQL that is not there rejects at once saying the connection was refused', async () => {
  const { connect: connectTo, LockBackendError: BackendError } = require('..')
  await assert.rejects(connectTo('mysql://root@127.0.0.1:1/test', { connectTimeout: 20_000 }), (err) => {
    assert.ok(err instanceof BackendError)
    assert.equal(err.cause.code, 'ERR_LOCK_STORE_UNREACHABLE')
    assert.match(err.cause.message, /connection refused/)
    return true
  })
})
