'use strict'
// Names and owners written by another process reach the operator's terminal: the CLI shows
// every control, format and bidi character in them escaped (`\x1b`, `\u202e`), in a real
// terminal (tmux) and in its output, and its --json stays valid with them escaped. Keys over a
// SQLite file (no server); owners written raw into Redis.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn, spawnSync, execFileSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { connect } = require('..')
const { REDIS_URL, needRedis, redisRaw, closeRaw, prefix, eventually, tmux } = require('./helpers')

const BIN = path.join(__dirname, '..', 'bin', 'deadbolt.js')
const DIR = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-hostile-'))
const URL_ = `sqlite://${path.join(DIR, 'locks.db')}`
after(() => {
  fs.rmSync(DIR, { recursive: true, force: true })
  closeRaw()
})

/** Sets the terminal's title, wipes the screen, links, returns the carriage, reverses text. */
const HOSTILE = '\x1b]2;pwned\x07\x1b[2J\x1b]8;;http://evil.invalid/\x07link\x1b]8;;\x07\r\u009b2J\u202eevil\u2066\u200f\x7f'
const SHOWN = String.raw`\x1b]2;pwned\x07\x1b[2J\x1b]8;;http://evil.invalid/\x07link\x1b]8;;\x07\r\x9b2J\u202eevil\u2066\u200f\x7f`
/** What no text output may carry raw: C0 but newline, DEL, C1, format, separators. */
const RAW = /(?!\n)[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u

function cli(...args) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', timeout: 30_000, stdio: ['ignore', 'pipe', 'pipe'] })
  return { code: r.status, out: r.stdout, err: r.stderr }
}

async function client(t, url = URL_) {
  const locks = await connect(url)
  t.after(() => locks.close())
  return locks
}

for (const command of [['list'], ['top', '--once', '--prefix'], ['inspect']]) {
  test(`${command[0]} shows a hostile lock name with its control and bidi characters escaped`, async (t) => {
    const locks = await client(t)
    const p = prefix('hostile')
    const key = `${p}${HOSTILE}`
    const lock = await locks.acquire(key, { ttl: 60_000, data: HOSTILE })
    t.after(() => lock.release())
    const r = cli(command[0], URL_, ...command.slice(1), command[0] === 'inspect' ? key : p)
    assert.equal(r.code, 0, r.err)
    assert.doesNotMatch(r.out, RAW)
    assert.ok(r.out.includes(`${p}${SHOWN}`), r.out)
  })
}

test('leader and permits show a hostile election or semaphore name escaped', async (t) => {
  const locks = await client(t)
  const name = `${prefix('hostile')}${HOSTILE}`
  const permit = await locks.semaphore(name, { limit: 2 }).acquire()
  t.after(() => permit.release())
  let elected
  const isElected = new Promise((resolve) => { elected = resolve })
  const election = locks.elect(`${name}:election`, { onElected: elected })
  t.after(() => election.resign())
  await isElected
  for (const [command, target] of [['permits', name], ['leader', `${name}:election`]]) {
    const r = cli(command, URL_, target)
    assert.equal(r.code, 0, r.err)
    assert.doesNotMatch(r.out, RAW, command)
    assert.ok(r.out.includes(SHOWN), `${command}: ${r.out}`)
  }
})

test('watch shows a hostile lock name and its holder escaped', async (t) => {
  const locks = await client(t)
  const key = `${prefix('hostile')}${HOSTILE}`
  const lock = await locks.acquire(key, { ttl: 60_000 })
  t.after(() => lock.release())
  const child = spawn(process.execPath, [BIN, 'watch', URL_, key], { stdio: ['ignore', 'pipe', 'pipe'] })
  t.after(() => child.kill('SIGKILL'))
  let out = ''
  child.stdout.setEncoding('utf8')
  child.stdout.on('data', (d) => { out += d })
  await eventually(() => out.includes('\n'), 15_000, 'the first line of watch')
  assert.doesNotMatch(out, RAW)
  assert.ok(out.includes(`${key.slice(0, -HOSTILE.length)}${SHOWN}  holder: `), out)
})

test('a backslash in a name is shown doubled, so a name cannot pass for an escape', async (t) => {
  const locks = await client(t)
  const key = `${prefix('hostile')}\\x1b`
  const lock = await locks.acquire(key)
  t.after(() => lock.release())
  const r = cli('inspect', URL_, key)
  assert.ok(r.out.startsWith(`${key.replace('\\', '\\\\')}  holder:`), r.out)
})

test('--json keeps a hostile name exactly, with C1, DEL, format and bidi characters escaped', async (t) => {
  const locks = await client(t)
  const p = prefix('hostile')
  const key = `${p}${HOSTILE}\u2028\u{e0001}`
  const lock = await locks.acquire(key, { ttl: 60_000, data: HOSTILE })
  t.after(() => lock.release())
  for (const args of [['list', URL_, p, '--json'], ['inspect', URL_, key, '--json'], ['top', URL_, '--once', '--json', '--prefix', p]]) {
    const r = cli(...args)
    assert.equal(r.code, 0, r.err)
    assert.doesNotMatch(r.out.trimEnd(), RAW, args[0])
    assert.ok(r.out.includes(String.raw`\u009b2J\u202eevil\u2066\u200f\u007f`), r.out)
    const parsed = JSON.parse(r.out)
    const row = args[0] === 'list' ? parsed[0] : args[0] === 'top' ? parsed.locks[0] : parsed
    assert.equal(row.key, key, args[0])
    assert.equal(row.data, HOSTILE, args[0])
  }
})

test('list, inspect and top show an owner written by another process escaped', async (t) => {
  if (!(await needRedis(t))) return
  const key = `${prefix('hostile')}owner`
  // A lock's value: its owner, 0xFF, its fencing token (src/store/redis/keys.rs).
  await redisRaw().set(key, Buffer.concat([Buffer.from(HOSTILE), Buffer.from([0xff]), Buffer.from('7')]), 'PX', 60_000)
  t.after(() => redisRaw().del(key))
  for (const args of [['list', REDIS_URL, key], ['inspect', REDIS_URL, key], ['top', REDIS_URL, '--once', '--prefix', key]]) {
    const r = cli(...args)
    assert.equal(r.code, 0, r.err)
    assert.doesNotMatch(r.out, RAW, args[0])
    assert.ok(r.out.includes(SHOWN), `${args[0]}: ${r.out}`)
  }
})


test('in a real terminal, a hostile lock name changes neither the title nor the screen', async (t) => {
  const bin = tmux(t)
  if (bin === null) return
  const locks = await client(t)
  const p = prefix('hostile')
  const lock = await locks.acquire(`${p}${HOSTILE}`, { ttl: 60_000 })
  t.after(() => lock.release())
  const session = `deadbolt-hostile-${process.pid}-${Date.now()}`
  const sh = (...args) => execFileSync(bin, args, { encoding: 'utf8' })
  // Single quotes: the shell passes what is inside as it is, control characters included.
  const run = (...args) => [process.execPath, BIN, ...args].map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(' ')
  const script = `echo before-the-cli; ${run('list', URL_, p)}; ${run('top', URL_, '--once', '--prefix', p)}; ${run('inspect', URL_, `${p}${HOSTILE}`)}; echo after-the-cli; sleep 30`
  sh('new-session', '-d', '-s', session, '-x', '250', '-y', '40', script)
  t.after(() => { try { sh('kill-session', '-t', session) } catch {} })
  const title = () => sh('display-message', '-p', '-t', session, '#{pane_title}').trim()
  const screen = () => sh('capture-pane', '-p', '-t', session)
  await eventually(() => screen().includes('after-the-cli'), 20_000, 'the commands to end')
  // `\x1b]2;pwned\x07` sent raw would have made this the pane's title.
  assert.notEqual(title(), 'pwned')
  const shown = screen()
  assert.ok(shown.includes('before-the-cli'), `the screen was wiped:\n${shown}`)
  // Once per command: list, top and inspect.
  assert.equal(shown.split(`${p}${SHOWN}`).length - 1, 3, shown)
  assert.ok(shown.includes('deadbolt top'), 'the header of top is there')
})
