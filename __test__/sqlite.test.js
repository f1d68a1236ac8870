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
