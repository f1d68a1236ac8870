'use strict'
// The sql-lock 0.1.3 face, black-box, against the real MariaDB: the behaviour a sql-lock user
// relies on, and the input checks sql-lock lacked. The face keeps module-level state (like
// sql-lock), so every test starts from `fresh()` or `close()`.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const path = require('node:path')
const deadbolt = require('..')
const { MYSQL_URL, needMysql, prefix, sleep } = require('./helpers')
const { tcpProxy } = require('./fixtures/tcp-proxy')

const { initialize, getLock, transaction, close, DLMError, DLMErrorTypes, connect, LockBackendError } = deadbolt

const run = prefix('sqllock')
let n = 0
const key = (name = 'k') => `${run}${++n}:${name}`

let inspector = null
/** A modern client on the same table, to look at what the face did. */
async function inspect(k) {
  if (inspector === null) inspector = await connect(MYSQL_URL)
  return inspector.inspect(k)
}

async function fresh(options) {
  await close()
  await initialize(MYSQL_URL, options)
}

after(async () => {
  await close()
  if (inspector !== null) await inspector.close()
  // Lease rows outlive their locks (they keep the fencing counter): drop this file's rows.
  const mysql = require('mysql2/promise')
  const conn = await mysql.createConnection(MYSQL_URL).catch(() => null)
  if (conn) {
    await conn.query("DELETE FROM deadbolt_locks WHERE name LIKE CONCAT(?, '%')", [Buffer.from(run)])
    await conn.end()
  }
})

/** Asserts a DLMError of `type`, with sql-lock's `err_message` and a stable code. */
function isDLM(type, errMessage, code) {
  return (err) => {
    assert.ok(err instanceof DLMError, `not a DLMError: ${err?.stack ?? err}`)
    assert.ok(err instanceof Error)
    assert.equal(err.err_type, type)
    if (errMessage !== undefined) assert.equal(err.err_message, errMessage)
    if (code !== undefined) assert.equal(err.code, code)
    assert.ok(err.message.startsWith(err.err_message), err.message)
    return true
  }
}

function invalidInput(errMessage, Class) {
  return (err) => {
    isDLM('invalid_parameters', errMessage)(err)
    assert.ok(err instanceof Class, `${err.name} is not a ${Class.name}`)
    assert.ok(['ERR_INVALID_ARG_TYPE', 'ERR_INVALID_ARG_VALUE', 'ERR_OUT_OF_RANGE'].includes(err.code), err.code)
    return true
  }
}

test('getLock before initialize rejects with a not_initialized DLMError', async () => {
  await close()
  await assert.rejects(getLock('k'), isDLM('not_initialized', 'configuration not set', 'ERR_LOCK_NOT_INITIALIZED'))
  await assert.rejects(transaction('k', () => 1), isDLM('not_initialized', 'configuration not set'))
})

test('initialize without a URI rejects with invalid_parameters "Mysql URI Missing"', async () => {
  for (const uri of ['', undefined, null]) {
    await assert.rejects(initialize(uri), invalidInput('Mysql URI Missing', TypeError), String(uri))
  }
})

test('initialize with a URI that is not mysql:// or mariadb:// rejects with invalid_parameters and does not echo it', async () => {
  for (const uri of ['redis://user:s3cretpw@127.0.0.1:6379', 'not a uri', 'mysql://root:s3cretpw@127.0.0.1:notaport/test', 42]) {
    await assert.rejects(initialize(uri), (err) => {
      invalidInput('Invalid Mysql URI', TypeError)(err)
      assert.ok(!err.message.includes('s3cretpw'), err.message)
      return true
    }, String(uri))
  }
  await assert.rejects(getLock('k'), isDLM('not_initialized'))
})

test('initialize with a bad locking_ttl rejects with invalid_parameters', async () => {
  for (const [ttl, Class] of [[0, RangeError], [-1, RangeError], [NaN, RangeError], [1.5, RangeError], ['1000', TypeError]]) {
    await assert.rejects(initialize(MYSQL_URL, { locking_ttl: ttl }), invalidInput('Invalid TTL', Class), String(ttl))
  }
})

test('initialize against a closed port rejects with initialization_failed within the connect timeout', async () => {
  await close()
  const started = Date.now()
  await assert.rejects(initialize('mysql://root@127.0.0.1:1/test'), (err) => {
    isDLM('initialization_failed', 'initialization failed', 'ERR_LOCK_INITIALIZATION_FAILED')(err)
    assert.ok(err.cause instanceof LockBackendError, 'the cause is the store error')
    return true
  })
  const elapsed = Date.now() - started
  // The default connect timeout is 5 s; sql-lock's Sequelize pool waited up to 30 s.
  assert.ok(elapsed < 10_000, `took ${elapsed} ms`)
  await assert.rejects(getLock('k'), isDLM('not_initialized'))
})

test('getLock resolves a releaser once the lock is held, and the releaser frees it', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const k = key()
  const release = await getLock(k)
  assert.equal(typeof release, 'function')
  assert.equal(typeof release.fencingToken, 'bigint')
  const info = await inspect(k)
  assert.ok(info, 'the lock is held')
  assert.equal(info.fencingToken, release.fencingToken)
  assert.equal(await release(), undefined)
  assert.equal(await inspect(k), null)
})

test('getLock leases for locking_ttl, 10 000 ms unless initialize says otherwise', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const a = key()
  const releaseA = await getLock(a)
  const remainingA = (await inspect(a)).remainingMs
  assert.ok(remainingA > 9000 && remainingA <= 10_000, `remaining ${remainingA}`)
  await releaseA()
  await fresh({ locking_ttl: 3000 })
  const b = key()
  const releaseB = await getLock(b)
  const remainingB = (await inspect(b)).remainingMs
  assert.ok(remainingB > 2000 && remainingB <= 3000, `remaining ${remainingB}`)
  await releaseB()
})

test('getLock(key, ttl) leases for ttl', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const k = key()
  const release = await getLock(k, 1500)
  const remaining = (await inspect(k)).remainingMs
  assert.ok(remaining > 500 && remaining <= 1500, `remaining ${remaining}`)
  await release()
})

test('a second getLock on a key held with ttl 1 000 and never released resolves after the ttl, not before', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const k = key()
  const started = Date.now()
  const first = await getLock(k, 1000)
  const second = await getLock(k)
  const elapsed = Date.now() - started
  // The first lease began after `started`, so it cannot have ended before started + 1000.
  assert.ok(elapsed >= 1000 - 1, `the second getLock resolved after ${elapsed} ms`)
  assert.ok(elapsed < 10_000, `the second getLock took ${elapsed} ms`)
  assert.ok(second.fencingToken > first.fencingToken)
  assert.equal(await first(), undefined)
  assert.equal((await inspect(k))?.fencingToken, second.fencingToken, 'the stale releaser left the new holder alone')
  await second()
})

test('getLock waits longer than the modern API default wait of 10 s when the holder keeps the lock', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const k = key()
  const started = Date.now()
  const first = await getLock(k, 10_500)
  const second = await getLock(k)
  const elapsed = Date.now() - started
  assert.ok(elapsed >= 10_500 - 1, `resolved after ${elapsed} ms`)
  await first()
  await second()
})

test('a waiting getLock gets the lock as soon as the holder calls its releaser', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const k = key()
  const first = await getLock(k, 30_000)
  let resolvedAt = 0
  const waiting = getLock(k).then((r) => { resolvedAt = Date.now(); return r })
  await sleep(200)
  assert.equal(resolvedAt, 0, 'the waiter did not get a held lock')
  const releasedAt = Date.now()
  await first()
  const second = await waiting
  // Well before the holder's 30 s lease would have run out.
  assert.ok(resolvedAt - releasedAt < 5000, `handed over after ${resolvedAt - releasedAt} ms`)
  await second()
})

test('different keys do not block each other: 25 locks held at once (sql-lock stopped at 10)', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const keys = Array.from({ length: 25 }, (_, i) => key(`multi${i}`))
  const releasers = []
  for (const k of keys) releasers.push(await getLock(k, 30_000))
  const infos = await Promise.all(keys.map((k) => inspect(k)))
  assert.ok(infos.every((i) => i !== null), 'all 25 are held at once')
  await Promise.all(releasers.map((r) => r()))
  assert.deepEqual(await Promise.all(keys.map((k) => inspect(k))), new Array(25).fill(null))
})

test('transaction runs fn with no arguments under the lock, resolves with its result and releases after', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const k = key()
  let argCount = -1
  let heldInside = null
  const result = await transaction(k, async function () {
    argCount = arguments.length
    heldInside = await inspect(k)
    return 'value'
  })
  assert.equal(result, 'value')
  assert.equal(argCount, 0)
  assert.ok(heldInside, 'the lock was held while fn ran')
  assert.equal(await inspect(k), null)
  assert.equal(await transaction(k, () => 7), 7, 'a synchronous fn works too')
  assert.equal(await inspect(k), null)
})

test('transaction releases the lock and rejects with the same error when fn throws', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const k = key()
  const boom = new Error('boom')
  await assert.rejects(transaction(k, async () => { throw boom }), (err) => err === boom)
  assert.equal(await inspect(k), null)
  await assert.rejects(transaction(k, () => { throw boom }), (err) => err === boom)
  assert.equal(await inspect(k), null)
})

test('concurrent transactions on one key never overlap', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const k = key()
  let inside = 0
  let max = 0
  let done = 0
  await Promise.all(Array.from({ length: 8 }, () => transaction(k, async () => {
    inside++
    max = Math.max(max, inside)
    await sleep(5)
    inside--
    done++
  })))
  assert.equal(max, 1)
  assert.equal(done, 8)
})

test('a getLock made while a transaction holds the key resolves only after fn settles, and the transaction resolves with its result', async (t) => {
  if (!(await needMysql(t))) return
  await fresh({ locking_ttl: 5000 })
  const k = key()
  const events = []
  let entered
  const inside = new Promise((resolve) => { entered = resolve })
  let open
  const gate = new Promise((resolve) => { open = resolve })
  const tx = transaction(k, async () => {
    entered()
    await gate
    events.push('fn settled')
    return 'ok'
  })
  await inside
  const waiting = getLock(k).then((release) => { events.push('getLock resolved'); return release })
  await sleep(200)
  assert.deepEqual(events, [], 'the getLock did not get the lock the transaction holds')
  open()
  assert.equal(await tx, 'ok')
  const release = await waiting
  assert.deepEqual(events, ['fn settled', 'getLock resolved'])
  await release()
})

test('the releaser is idempotent and never frees a later holder\'s lock', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const k = key()
  const first = await getLock(k)
  const calls = [first(), first()]
  assert.deepEqual(await Promise.all(calls), [undefined, undefined])
  const second = await getLock(k)
  assert.equal(await first(), undefined)
  assert.equal((await inspect(k))?.fencingToken, second.fencingToken, 'the second holder still holds it')
  await second()
})

test('the releaser resolves when the lease already ran out', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const k = key()
  const release = await getLock(k, 100)
  await sleep(300)
  assert.equal(await inspect(k), null)
  assert.equal(await release(), undefined)
})

test('fencing tokens of getLock strictly increase per key', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const k = key()
  let last = 0n
  for (let i = 0; i < 5; i++) {
    const release = await getLock(k)
    assert.ok(release.fencingToken > last)
    last = release.fencingToken
    await release()
  }
})

test('bad input to getLock or transaction gets a typed invalid_parameters error and sends no SQL', async (t) => {
  if (!(await needMysql(t))) return
  // All traffic goes through a relay that counts the bytes sent to the server.
  const proxy = await tcpProxy(Number(new URL(MYSQL_URL).port || 3306), new URL(MYSQL_URL).hostname)
  try {
    const url = new URL(MYSQL_URL)
    url.port = String(proxy.port)
    await close()
    await initialize(url.toString(), { poolSize: 1 })
    // Warm the connection, so the control call below has nothing to set up.
    const warm = await getLock(key())
    await warm()
    const cases = [
      [() => getLock(''), 'Invalid Key', TypeError],
      [() => getLock(), 'Invalid Key', TypeError],
      [() => getLock(42), 'Invalid Key', TypeError],
      [() => getLock({ id: 'x' }), 'Invalid Key', TypeError],
      [() => getLock('x'.repeat(1025)), 'Invalid Key', RangeError],
      [() => getLock('é'.repeat(513)), 'Invalid Key', RangeError],
      [() => getLock('k', NaN), 'Invalid TTL', RangeError],
      [() => getLock('k', -1), 'Invalid TTL', RangeError],
      [() => getLock('k', 0), 'Invalid TTL', RangeError],
      [() => getLock('k', 1.5), 'Invalid TTL', RangeError],
      [() => getLock('k', Infinity), 'Invalid TTL', RangeError],
      [() => getLock('k', '1000'), 'Invalid TTL', TypeError],
      [() => transaction('', () => 1), 'Invalid Key', TypeError],
      [() => transaction('k'), 'Invalid Function', TypeError],
      [() => transaction('k', 'not a function'), 'Invalid Function', TypeError],
    ]
    const before = proxy.stats.sent
    for (const [fn, errMessage, Class] of cases) {
      const started = Date.now()
      await assert.rejects(fn, invalidInput(errMessage, Class), String(fn))
      assert.ok(Date.now() - started < 100, 'rejected at once')
    }
    assert.equal(proxy.stats.sent, before, 'no byte reached the server')
    // The control: a valid call does go through the relay, so the counter can see traffic.
    const release = await getLock(key())
    await release()
    assert.ok(proxy.stats.sent > before, 'a valid getLock was counted')
  } finally {
    await close()
    await proxy.close()
  }
})

test('getLock called while initialize is still connecting waits for it (sql-lock\'s README does not await initialize)', async (t) => {
  if (!(await needMysql(t))) return
  await close()
  const initializing = initialize(MYSQL_URL)
  const release = await getLock(key())
  await release()
  await initializing
})

test('a second initialize keeps the locks taken before it releasable', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const k = key()
  const release = await getLock(k)
  await initialize(MYSQL_URL, { locking_ttl: 5000 })
  assert.ok(await inspect(k), 'still held after the second initialize')
  await release()
  assert.equal(await inspect(k), null)
  const other = key()
  const next = await getLock(other)
  assert.ok((await inspect(other)).remainingMs <= 5000, 'the new locking_ttl applies')
  await next()
})

test('a second initialize lets a getLock still waiting through the first one finish', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const k = key()
  const holder = await getLock(k, 30_000)
  const waiting = getLock(k)
  const outcome = waiting.then(() => 'resolved', (err) => err)
  await sleep(100)
  await initialize(MYSQL_URL)
  await holder()
  const waiter = await waiting
  assert.equal(await outcome, 'resolved')
  assert.ok(await inspect(k), 'the waiter holds it')
  await waiter()
  assert.equal(await inspect(k), null)
})

test('close releases the locks taken through the face and later getLock rejects not_initialized', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const k = key()
  const release = await getLock(k, 30_000)
  await close()
  assert.equal(await inspect(k), null)
  assert.equal(await release(), undefined, 'a releaser after close still resolves')
  await assert.rejects(getLock(k), isDLM('not_initialized'))
  await close()
})

test('close while getLock waits rejects the wait with ERR_LOCK_CLOSED', async (t) => {
  if (!(await needMysql(t))) return
  await fresh()
  const k = key()
  await getLock(k, 30_000)
  const waiting = getLock(k)
  const outcome = waiting.then(() => 'resolved', (err) => err)
  await sleep(100)
  const closedAt = Date.now()
  await close()
  await assert.rejects(outcome.then((r) => { throw r }), { code: 'ERR_LOCK_CLOSED', name: 'LockClosedError' })
  assert.ok(Date.now() - closedAt < 5000)
  assert.equal(await inspect(k), null)
})

test('a process holding a lock exits on its own, without close (sql-lock\'s ttl timer and pool kept it running)', async (t) => {
  if (!(await needMysql(t))) return
  const k = key('exit')
  const started = Date.now()
  const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'sqllock-holder.js'), MYSQL_URL, k], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout.on('data', (d) => { out += d })
  const code = await new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000)
    child.on('exit', (c) => { clearTimeout(timer); resolve(c) })
  })
  const elapsed = Date.now() - started
  assert.equal(code, 0)
  assert.match(out, /^held \d+\n$/)
  // The held lock's ttl is 30 s: exiting long before it shows that nothing waits for it.
  assert.ok(elapsed < 15_000, `exited after ${elapsed} ms`)
  // Exiting, the process releases what it still holds on a best-effort basis (its clean-up
  // hook closes its clients, racing the exit): the lock is either still the child's until its
  // ttl, or free, never anyone else's.
  const info = await inspect(`${k}:held`)
  if (info !== null) assert.equal(String(info.fencingToken), out.trim().split(' ')[1])
})

test('DLMError is constructed as in sql-lock and DLMErrorTypes keeps its names', () => {
  const err = new DLMError({ err_type: DLMErrorTypes.NOT_INITIALIZED, err_message: 'configuration not set' })
  assert.ok(err instanceof Error)
  assert.ok(err instanceof DLMError)
  assert.equal(err.message, 'configuration not set')
  assert.equal(err.err_message, 'configuration not set')
  assert.equal(err.err_type, 'not_initialized')
  assert.equal(err.code, 'ERR_LOCK_NOT_INITIALIZED')
  assert.equal(DLMErrorTypes.INVALID_PARAMTERS, 'invalid_parameters')
  assert.equal(DLMErrorTypes.INITIALIZATION_FAILED, 'initialization_failed')
  assert.ok(!(new TypeError('plain') instanceof DLMError), 'only deadbolt\'s errors are DLMErrors')
})
