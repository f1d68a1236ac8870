'use strict'
// The operator's CLI, run as a user runs it (a child process), against the real servers.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn, spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const readline = require('node:readline')
const { connect } = require('..')
const { REDIS_URL, MYSQL_URL, PG_URL, needRedis, needMysql, needPg, prefix } = require('./helpers')

const BIN = path.join(__dirname, '..', 'bin', 'deadbolt.js')
const SQLITE_DIR = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-cli-sqlite-'))
const SQLITE_URL = `sqlite://${path.join(SQLITE_DIR, 'locks.db')}`
after(() => fs.rmSync(SQLITE_DIR, { recursive: true, force: true }))

function cli(...args) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', timeout: 30_000, stdio: ['ignore', 'pipe', 'pipe'] })
  return { code: r.status, out: r.stdout.trim(), err: r.stderr.trim() }
}

for (const store of [{ name: 'redis', url: REDIS_URL, need: needRedis }, { name: 'mysql', url: MYSQL_URL, need: needMysql }, { name: 'postgres', url: PG_URL, need: needPg }, { name: 'sqlite', url: SQLITE_URL, need: async () => true }]) {
  test(`on ${store.name}, inspect prints the holder and token, and --json gives them to scripts`, async (t) => {
    if (!(await store.need(t))) return
    const locks = await connect(store.url, { name: 'cli-holder' })
    try {
      const k = prefix('cli') + 'inspect'
      const lock = await locks.acquire(k, { data: 'host-a' })
      const text = cli('inspect', store.url, k)
      assert.equal(text.code, 0, text.err)
      assert.match(text.out, new RegExp(`holder: ${lock.owner}`))
      assert.match(text.out, new RegExp(`  pid: ${process.pid}  name: cli-holder`))
      assert.match(text.out, new RegExp(`token: ${lock.fencingToken}`))
      const json = JSON.parse(cli('inspect', store.url, k, '--json').out)
      assert.deepEqual([json.key, json.owner, json.fencingToken, json.data], [k, lock.owner, String(lock.fencingToken), 'host-a'])
      assert.deepEqual(json.holder, { host: os.hostname(), pid: process.pid, name: 'cli-holder' })
      await lock.release()
      const free = cli('inspect', store.url, k)
      assert.equal(free.code, 1, 'exit 1 when free')
    } finally {
      await locks.close()
    }
  })

  test(`on ${store.name}, permits prints who holds a semaphore's permits, and --json gives them to scripts`, async (t) => {
    if (!(await store.need(t))) return
    const locks = await connect(store.url)
    try {
      const name = prefix('cli') + 'sem'
      const sem = locks.semaphore(name, { limit: 3 })
      const a = await sem.acquire({ permits: 2 })
      const text = cli('permits', store.url, name)
      assert.equal(text.code, 0, text.err)
      assert.match(text.out, new RegExp(`holder: ${a.owner}  permits: 2  token: ${a.fencingToken}`))
      const json = JSON.parse(cli('permits', store.url, name, '--json').out)
      assert.deepEqual(json.map((h) => [h.owner, h.permits, h.fencingToken]), [[a.owner, 2, String(a.fencingToken)]])
      await a.release()
      assert.equal(cli('permits', store.url, name).code, 1, 'exit 1 when nobody holds any')
    } finally {
      await locks.close()
    }
  })

  test(`on ${store.name}, list shows the held locks under a prefix and release --force --yes frees one`, async (t) => {
    if (!(await store.need(t))) return
    const locks = await connect(store.url)
    try {
      const p = prefix('cli') + 'list:'
      const a = await locks.acquire(`${p}a`)
      const b = await locks.acquire(`${p}b`)
      const listed = JSON.parse(cli('list', store.url, p, '--json').out)
      assert.deepEqual(listed.map((l) => l.key), [a.key, b.key])
      assert.match(cli('list', store.url, p).out, /KEY\s+HOLDER\s+TOKEN/)
      const refused = cli('release', store.url, a.key)
      assert.equal(refused.code, 2, 'release without --force is a usage error')
      const released = cli('release', store.url, '--force', a.key, '--yes')
      assert.equal(released.code, 0, released.err)
      assert.equal(await locks.inspect(a.key), null)
      assert.equal(cli('release', store.url, '--force', a.key, '--yes').code, 1, 'exit 1: nothing to free')
      await b.release()
    } finally {
      await locks.close()
    }
  })
}

test('list says when more locks are held than --limit shows (on stderr with --json)', async () => {
  const locks = await connect(SQLITE_URL)
  try {
    const p = prefix('cli') + 'more:'
    for (const k of ['a', 'b', 'c']) await locks.acquire(`${p}${k}`)
    const text = cli('list', SQLITE_URL, p, '--limit', '2')
    assert.equal(text.code, 0, text.err)
    assert.match(text.out, /^2 shown; more are held \(--limit shows more/m)
    const json = cli('list', SQLITE_URL, p, '--limit', '2', '--json')
    assert.equal(JSON.parse(json.out).length, 2)
    assert.match(json.err, /^2 shown; more are held/)
    assert.doesNotMatch(cli('list', SQLITE_URL, p, '--limit', '3').out, /more are held/)
  } finally {
    await locks.close()
  }
})

test('release --force without --yes and without a terminal to ask frees nothing', async (t) => {
  if (!(await needRedis(t))) return
  const locks = await connect(REDIS_URL)
  try {
    const lock = await locks.acquire(prefix('cli') + 'ask')
    const r = cli('release', REDIS_URL, '--force', lock.key)
    assert.notEqual(r.code, 0)
    assert.equal((await locks.inspect(lock.key)).owner, lock.owner)
    await lock.release()
  } finally {
    await locks.close()
  }
})

test('leader prints the elected candidate and its term', async (t) => {
  if (!(await needRedis(t))) return
  const locks = await connect(REDIS_URL)
  try {
    const name = prefix('cli') + 'election'
    let elected
    const isElected = new Promise((resolve) => { elected = resolve })
    const election = locks.elect(name, { data: 'host-b', onElected: elected })
    await isElected
    const r = JSON.parse(cli('leader', REDIS_URL, name, '--json').out)
    assert.equal(r.data, 'host-b')
    assert.equal(r.fencingToken, String(election.term))
    await election.resign()
    assert.equal(cli('leader', REDIS_URL, name).code, 1)
  } finally {
    await locks.close()
  }
})

test('watch prints a line each time the holder changes', { timeout: 30_000 }, async (t) => {
  if (!(await needRedis(t))) return
  const locks = await connect(REDIS_URL)
  const k = prefix('cli') + 'watch'
  const child = spawn(process.execPath, [BIN, 'watch', REDIS_URL, k, '--json', '--interval', '20'], { stdio: ['ignore', 'pipe', 'inherit'] })
  try {
    const lines = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]()
    const next = async () => JSON.parse((await lines.next()).value)
    assert.equal((await next()).owner, null, 'free at first')
    const a = await locks.acquire(k)
    assert.equal((await next()).owner, a.owner)
    await a.release()
    const b = await locks.acquire(k)
    let seen = await next()
    // The free moment between the two holders may or may not be seen.
    if (seen.owner === null) seen = await next()
    assert.equal(seen.owner, b.owner)
    await b.release()
  } finally {
    child.kill('SIGINT')
    await locks.close()
  }
})

test('usage errors exit 2 with help, and an unreachable store exits 3', () => {
  assert.equal(cli('frobnicate', REDIS_URL).code, 2)
  assert.equal(cli('inspect').code, 2)
  assert.equal(cli('list', REDIS_URL, '--limit', 'x').code, 2)
  const help = cli('inspect', '--help')
  assert.equal(help.code, 0)
  assert.match(help.out, /Usage: deadbolt inspect/)
  assert.equal(cli('inspect', 'redis://127.0.0.1:1', 'k').code, 3)
})

/** The tables (and, on PostgreSQL, sequences) of the shared server whose names start with `name`. */
async function relationsNamed(store, name) {
  if (store === 'mysql') {
    const conn = await require('mysql2/promise').createConnection(MYSQL_URL)
    try {
      const [rows] = await conn.query('SELECT table_name AS n FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE ?', [`${name}%`])
      return rows.map((r) => r.n)
    } finally {
      await conn.end()
    }
  }
  const { Client } = require('pg')
  const conn = new Client({ connectionString: PG_URL })
  await conn.connect()
  try {
    const { rows } = await conn.query("SELECT c.relname AS n FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = current_schema() AND c.relname LIKE $1 AND c.relkind IN ('r', 'S')", [`${name}%`])
    return rows.map((r) => r.n)
  } finally {
    await conn.end()
  }
}

for (const store of [{ name: 'mysql', url: MYSQL_URL, need: needMysql }, { name: 'postgres', url: PG_URL, need: needPg }]) {
  test(`on ${store.name}, the commands that only look create no table and find nothing in a table that does not exist`, async (t) => {
    if (!(await store.need(t))) return
    const table = `cli_fresh_${prefix('t').split(':')[2]}`
    const inspect = cli('inspect', store.url, 'k', '--table', table)
    assert.equal(inspect.code, 1, inspect.err)
    const list = cli('list', store.url, '--table', table, '--json')
    assert.equal(list.code, 0, list.err)
    assert.deepEqual(JSON.parse(list.out), [])
    const permits = cli('permits', store.url, 'p', '--table', table)
    assert.equal(permits.code, 1, permits.err)
    const leader = cli('leader', store.url, 'e', '--table', table)
    assert.equal(leader.code, 1, leader.err)
    assert.deepEqual(await relationsNamed(store.name, table), [])
  })
}

test('on sqlite, the commands that only look create no file and find nothing where there is none', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-cli-'))
  try {
    const url = `sqlite://${path.join(dir, 'locks.db')}`
    assert.equal(cli('inspect', url, 'k').code, 1)
    const list = cli('list', url, '--json')
    assert.equal(list.code, 0, list.err)
    assert.deepEqual(JSON.parse(list.out), [])
    assert.equal(cli('permits', url, 'p').code, 1)
    assert.equal(cli('leader', url, 'e').code, 1)
    assert.deepEqual(fs.readdirSync(dir), [])
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('--version and -v print the package version and exit 0', () => {
  const { version } = require('../package.json')
  for (const flag of ['--version', '-v']) {
    const r = cli(flag)
    assert.deepEqual([r.code, r.out, r.err], [0, version, ''], flag)
  }
})

test('help <command> prints that command\'s help, the same as <command> --help', () => {
  for (const command of ['inspect', 'list', 'release', 'watch', 'leader', 'permits']) {
    const r = cli('help', command)
    assert.equal(r.code, 0, r.err)
    assert.match(r.out, new RegExp(`^Usage: deadbolt ${command} `))
    assert.equal(r.out, cli(command, '--help').out)
  }
  const unknown = cli('help', 'frobnicate')
  assert.equal(unknown.code, 2)
  assert.match(unknown.err, /unknown command "frobnicate"/)
  assert.equal(cli('help', 'toString').code, 2, 'an Object.prototype name is not a command')
})

for (const [signal, code] of [['SIGTERM', 143], ['SIGINT', 130]]) {
  test(`a ${signal} ends a command waiting on a store that does not answer at once (exit ${code})`, async (t) => {
    const { eventually } = require('./helpers')
    const sockets = new Set()
    const server = require('node:net').createServer((s) => { sockets.add(s); s.on('error', () => {}) })
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    t.after(() => { for (const s of sockets) s.destroy(); server.close() })
    const child = spawn(process.execPath, [BIN, 'inspect', `redis://127.0.0.1:${server.address().port}`, 'k'], { stdio: 'ignore' })
    t.after(() => { if (child.exitCode === null) child.kill('SIGKILL') })
    const exited = new Promise((resolve) => child.once('exit', (c, s) => resolve({ code: c, signal: s })))
    // Connected: the CLI is running, its signal handlers installed.
    await eventually(() => sockets.size > 0, 15_000, 'the CLI to connect')
    child.kill(signal)
    assert.deepEqual(await exited, { code, signal: null })
  })
}
