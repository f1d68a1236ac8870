'use strict'
// The SQLite store across real processes on one file: mutual exclusion with fencing tokens in
// grant order, a fresh file opened by several processes at once, and release announcements
// that wake a waiter in another process without a poll.
const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { spawn } = require('node:child_process')
const { connect } = require('..')
const { prefix } = require('./helpers')

const CHILD = path.join(__dirname, 'fixtures', 'child.js')

function tempDir(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-sqlite-'))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** Starts a child; `lines` yields its stdout lines, `exited` its exit code. */
function child(args) {
  const proc = spawn(process.execPath, [CHILD, ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  const waiters = []
  proc.stdout.setEncoding('utf8')
  proc.stdout.on('data', (d) => {
    out += d
    for (const w of waiters.splice(0)) w()
  })
  const exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)))
  return {
    proc,
    exited,
    get out() { return out },
    /** Resolves once stdout holds `line`. */
    async line(line) {
      while (!out.split('\n').includes(line)) await new Promise((resolve) => waiters.push(resolve))
    },
  }
}

test('4 processes on one fresh file run 400 critical sections without overlap, tokens increasing in grant order', async (t) => {
  const dir = tempDir(t)
  const url = `sqlite://${path.join(dir, 'locks.db')}`
  const key = `${prefix('sqlite')}sections`
  // All start at once on a file that does not exist yet: they race to create it.
  const children = [0, 1, 2, 3].map(() => child(['sections', url, key, '100', dir]))
  const codes = await Promise.all(children.map((c) => c.exited))
  assert.deepEqual(codes, [0, 0, 0, 0])
  assert.deepEqual(children.map((c) => c.out.trim()), ['0', '0', '0', '0'], 'overlaps seen inside a section')
  const tokens = fs.readFileSync(path.join(dir, 'log'), 'utf8').trim().split('\n').map(BigInt)
  assert.equal(tokens.length, 400)
  for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i] > tokens[i - 1], `token ${i}: ${tokens[i]} after ${tokens[i - 1]}`)
})

// Without a wake-up the waiter would hang: the time-out turns that into a failure.
test('a release wakes a waiter in another process that would otherwise not poll for 24 days', { timeout: 60_000 }, async (t) => {
  const dir = tempDir(t)
  const url = `sqlite://${path.join(dir, 'locks.db')}`
  const key = `${prefix('sqlite')}wake`
  const locks = await connect(url)
  t.after(() => locks.close())
  const lock = await locks.acquire(key)
  const waiter = child(['wait-for', url, key])
  t.after(() => waiter.proc.kill('SIGKILL'))
  await waiter.line('waiting')
  await lock.release()
  await waiter.line('acquired')
  assert.equal(await waiter.exited, 0)
})

test('a file in a directory that does not exist is refused with the reason, and the directory is not created', async (t) => {
  const dir = tempDir(t)
  const missing = path.join(dir, 'missing')
  await assert.rejects(connect(`sqlite://${path.join(missing, 'locks.db')}`), (err) =>
    err.code === 'ERR_LOCK_BACKEND' && err.cause.code === 'ERR_LOCK_STORE_UNREACHABLE' && /does not exist/.test(err.cause.message))
  assert.equal(fs.existsSync(missing), false)
})

test('sqlite://relative/path is resolved against the working directory', async (t) => {
  const dir = tempDir(t)
  const cwd = process.cwd()
  process.chdir(dir)
  t.after(() => process.chdir(cwd))
  const locks = await connect('sqlite://relative.db')
  await (await locks.acquire('k')).release()
  await locks.close()
  assert.ok(fs.existsSync(path.join(dir, 'relative.db')))
})

test('URL parameters and in-memory SQLite databases are refused before any I/O', async () => {
  for (const url of ['sqlite:///tmp/x.db?mode=ro', 'sqlite://:memory:', 'sqlite://']) {
    await assert.rejects(connect(url), (err) => err instanceof TypeError && err.code === 'ERR_INVALID_ARG_VALUE', url)
  }
})

// A file deleted or replaced while a lock is held in it: SQLite keeps using the old file, so
// without the check the holder's heartbeats would keep succeeding there, unseen by anyone.

/** The database files (main, -wal, -shm) in `dir`, sorted. */
function dbFiles(dir) {
  return fs.readdirSync(dir).filter((f) => f.startsWith('locks.db')).sort()
}

/** Resolves with the signal's reason once it aborts (keeping the event loop alive: a heartbeat does not). */
function aborted(signal) {
  const alive = setInterval(() => {}, 1000)
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(signal.reason), { once: true }))
    .finally(() => clearInterval(alive))
}

/** A closed database made at `dir/new.db` by a client of its own. */
async function newDatabase(dir) {
  const file = path.join(dir, 'new.db')
  const maker = await connect(`sqlite://${file}`, { responseTimeout: 4999 })
  await (await maker.acquire(`${prefix('sqlite')}maker`)).release()
  await maker.close()
  return file
}

for (const [how, replace] of [
  ['deleted with its -wal and -shm files', async (dir) => {
    for (const f of dbFiles(dir)) fs.rmSync(path.join(dir, f))
  }],
  ['replaced by another file renamed over it', async (dir) => {
    fs.renameSync(await newDatabase(dir), path.join(dir, 'locks.db'))
  }],
]) {
  test(`a file ${how} while a lock is held makes the lock lost with ERR_LOCK_STORE_REPLACED, and the next calls use the new file`, { timeout: 30_000 }, async (t) => {
    const dir = tempDir(t)
    const url = `sqlite://${path.join(dir, 'locks.db')}`
    const key = `${prefix('sqlite')}replaced`
    const locks = await connect(url)
    t.after(() => locks.close())
    const lock = await locks.acquire(key, { ttl: 1000, autoExtend: true, extendEvery: 100 })
    const lost = aborted(lock.signal)
    await replace(dir)
    // Without the check the heartbeat keeps the lock in the old file and this never settles.
    const err = await lost
    assert.equal(err.code, 'ERR_LOCK_LOST')
    assert.equal(err.reason, 'not-owned')
    assert.equal(err.cause?.code, 'ERR_LOCK_STORE_REPLACED')
    assert.equal(lock.held, false)
    // Another process takes the key in the file now at the path, with a higher token.
    const other = child(['fence', url, key, '1'])
    assert.equal(await other.exited, 0)
    const token = BigInt(other.out.trim())
    assert.ok(token > lock.fencingToken, `${token} after ${lock.fencingToken}`)
    // The old client works on the new file: its next grant comes after the other's.
    const again = await locks.acquire(key, { wait: 5000 })
    assert.ok(again.fencingToken > token, `${again.fencingToken} after ${token}`)
    assert.equal((await locks.inspect(key)).owner, again.owner)
    await again.release()
  })
}

/** Whether the `sqlite3` shell is installed (it holds the write lock for the test below). */
function hasSqliteShell() {
  return require('node:child_process').spawnSync('sqlite3', ['-version']).status === 0
}

// Issue 46's schedule: another process holds the file's write lock, a process waits for it in
// SQLite's busy handler, the file is deleted and another renamed over it, a process that had
// the old file open takes the key in the new one, and only then does the write lock come free.
// The waiting statement then runs in the old file, which nobody reads any more.
test('a grant in a file replaced while the statement waited for another process\'s write lock is not reported', { timeout: 30_000 }, async (t) => {
  if (!hasSqliteShell()) {
    if (process.env.CI) assert.fail('the sqlite3 shell is not installed')
    return t.skip('the sqlite3 shell is not installed')
  }
  const dir = tempDir(t)
  const file = path.join(dir, 'locks.db')
  const url = `sqlite://${file}`
  const key = `${prefix('sqlite')}swapped`
  const locks = await connect(url)
  t.after(() => locks.close())
  await (await locks.acquire(`${prefix('sqlite')}open`)).release()
  const go = path.join(dir, 'go')
  const waiting = child(['try-when', url, key, go])
  t.after(() => waiting.proc.kill('SIGKILL'))
  await waiting.line('ready')
  // Another process takes the write lock and keeps it.
  const shell = spawn('sqlite3', [file], { stdio: ['pipe', 'pipe', 'inherit'] })
  t.after(() => shell.kill('SIGKILL'))
  let said = ''
  const locked = new Promise((resolve) => shell.stdout.on('data', (d) => { said += d; if (said.includes('locked')) resolve() }))
  shell.stdin.write("BEGIN IMMEDIATE;\nSELECT 'locked';\n")
  await locked
  fs.writeFileSync(go, '')
  await waiting.line('asking')
  // Its statement now waits in the busy handler (the file check before it takes microseconds).
  await new Promise((resolve) => setTimeout(resolve, 200))
  const replacement = await newDatabase(dir)
  for (const f of dbFiles(dir)) fs.rmSync(path.join(dir, f))
  fs.renameSync(replacement, file)
  const mine = await locks.tryAcquire(key, { ttl: 10_000 })
  assert.ok(mine !== null, 'the new file is free')
  shell.stdin.end('ROLLBACK;\n.quit\n')
  while (!/\n(busy|granted \d+)\n/.test(waiting.out)) await new Promise((resolve) => setTimeout(resolve, 10))
  assert.match(waiting.out, /\nbusy\n/, `granted in the old file while ${mine.owner} holds the key in the new one`)
  assert.equal(mine.held, true)
  await mine.release()
})

test('closing the last client of a file removes its -wal and -shm files before close resolves', async (t) => {
  const dir = tempDir(t)
  const locks = await connect(`sqlite://${path.join(dir, 'locks.db')}`)
  await (await locks.acquire(`${prefix('sqlite')}wal`)).release()
  assert.deepEqual(dbFiles(dir), ['locks.db', 'locks.db-shm', 'locks.db-wal'])
  await locks.close()
  assert.deepEqual(dbFiles(dir), ['locks.db'])
})

test('a client closed while another client of the same file is open leaves the files to the last one', async (t) => {
  const dir = tempDir(t)
  const url = `sqlite://${path.join(dir, 'locks.db')}`
  const [a, b] = [await connect(url), await connect(url)]
  await (await a.acquire(`${prefix('sqlite')}wal`)).release()
  await a.close()
  assert.deepEqual(dbFiles(dir), ['locks.db', 'locks.db-shm', 'locks.db-wal'])
  await (await b.acquire(`${prefix('sqlite')}wal`)).release()
  await b.close()
  assert.deepEqual(dbFiles(dir), ['locks.db'])
})

test('extend() of a lock whose file was replaced rejects with the loss, whose cause has ERR_LOCK_STORE_REPLACED', async (t) => {
  const dir = tempDir(t)
  const locks = await connect(`sqlite://${path.join(dir, 'locks.db')}`)
  t.after(() => locks.close())
  const lock = await locks.acquire(`${prefix('sqlite')}extend`, { ttl: 10_000 })
  for (const f of dbFiles(dir)) fs.rmSync(path.join(dir, f))
  await assert.rejects(lock.extend(), (err) =>
    err.code === 'ERR_LOCK_EXTEND' && err.cause?.code === 'ERR_LOCK_LOST' && err.cause.cause?.code === 'ERR_LOCK_STORE_REPLACED')
  assert.equal(lock.held, false)
  assert.equal(lock.signal.reason.cause.code, 'ERR_LOCK_STORE_REPLACED')
})
