'use strict'
// `deadbolt top`: one frame with --once (text and --json), and the live view in a real terminal
// (tmux), over a SQLite file (no server needed). Without tmux the terminal test fails under CI
// and is skipped elsewhere.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn, spawnSync, execFileSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { connect } = require('..')
const { prefix, eventually, tmux } = require('./helpers')

const BIN = path.join(__dirname, '..', 'bin', 'deadbolt.js')
const DIR = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-top-'))
const URL_ = `sqlite://${path.join(DIR, 'locks.db')}`
after(() => fs.rmSync(DIR, { recursive: true, force: true }))

function cli(...args) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', timeout: 30_000, stdio: ['ignore', 'pipe', 'pipe'] })
  return { code: r.status, out: r.stdout, err: r.stderr }
}

async function client(t, options) {
  const locks = await connect(URL_, options)
  t.after(() => locks.close())
  return locks
}

/** The line of `text` that contains `needle`, split into its columns. */
function columnsOf(text, needle) {
  const line = text.split('\n').find((l) => l.includes(needle))
  assert.ok(line, `no line with ${needle} in:\n${text}`)
  return line.trim().split(/\s{2,}/)
}

test('top --once prints each held lock: key, holder, token, lease left, and – for how long it was held', async (t) => {
  const locks = await client(t, { name: 'top-holder' })
  const p = prefix('top')
  const lock = await locks.acquire(`${p}a`, { ttl: 30_000 })
  const r = cli('top', URL_, '--once', '--prefix', p)
  assert.equal(r.code, 0, r.err)
  const [key, holder, token, lease, heldFor] = columnsOf(r.out, `${p}a`)
  assert.deepEqual([key, holder, token], [`${p}a`, `top-holder@${os.hostname()}/${process.pid}`, String(lock.fencingToken)])
  assert.match(lease, /^[0-9]+s$/)
  // One look cannot tell how long it has been held: the store does not say.
  assert.equal(heldFor, '–')
  await lock.release()
})

test('top --once --prefix shows only the locks under the prefix', async (t) => {
  const locks = await client(t)
  const p = prefix('top')
  const mine = await locks.acquire(`${p}mine`)
  const other = await locks.acquire(`${prefix('top')}other`)
  const r = cli('top', URL_, '--once', '--prefix', p)
  assert.match(r.out, /LOCKS \(1\)/)
  assert.ok(r.out.includes(`${p}mine`))
  assert.ok(!r.out.includes('other'))
  await mine.release()
  await other.release()
})

test('top --once --json prints the frame as JSON, with null for what the store cannot tell', async (t) => {
  const locks = await client(t)
  const p = prefix('top')
  const lock = await locks.acquire(`${p}j`, { ttl: 30_000 })
  const frame = JSON.parse(cli('top', URL_, '--once', '--json', '--prefix', p).out)
  assert.equal(frame.prefix, p)
  const me = { host: os.hostname(), pid: process.pid, name: null }
  assert.deepEqual(frame.locks.map((l) => [l.key, l.owner, l.holder, l.fencingToken, l.heldForMs]), [[`${p}j`, lock.owner, me, String(lock.fencingToken), null]])
  assert.ok(frame.locks[0].leaseMs > 0 && frame.locks[0].leaseMs <= 30_000)
  await lock.release()
})

test('top shows the semaphores and elections it is given, with – for a limit it was not told', async (t) => {
  const locks = await client(t)
  const p = prefix('top')
  const permit = await locks.semaphore(`${p}sem`, { limit: 4 }).acquire({ permits: 3 })
  const election = locks.elect(`${p}lead`, { ttl: 5000 })
  t.after(() => election.resign())
  await eventually(() => election.isLeader, 10_000, 'leadership')
  const r = cli('top', URL_, '--once', '--prefix', p, '--semaphore', `${p}sem`, '--semaphore', `${p}sem=4`, '--election', `${p}lead`)
  assert.equal(r.code, 0, r.err)
  const [, afterSemaphores] = r.out.split('SEMAPHORES (2)')
  const [semaphores, leaders] = afterSemaphores.split('LEADERS (1)')
  const rows = semaphores.trim().split('\n').slice(1).map((l) => l.trim().split(/\s{2,}/))
  const me = `${os.hostname()}/${process.pid}`
  assert.deepEqual(rows, [[`${p}sem`, '3', '–', `${me}×3`], [`${p}sem`, '3', '4', `${me}×3`]])
  const [name, leader, term] = columnsOf(leaders, `${p}lead`)
  assert.deepEqual([name, leader, term], [`${p}lead`, me, String(election.term)])
  await permit.release()
})

test('top takes no positional prefix: it says to use --prefix (exit 2)', () => {
  const r = cli('top', URL_, 'orders:')
  assert.equal(r.code, 2)
  assert.match(r.err, /--prefix orders:/)
})


test('in a real terminal, top redraws every second: a lock taken after it started appears, and Ctrl-C quits', async (t) => {
  const bin = tmux(t)
  if (bin === null) return
  const locks = await client(t)
  const p = prefix('top')
  const session = `deadbolt-top-${process.pid}-${Date.now()}`
  const first = await locks.acquire(`${p}first`, { ttl: 60_000 })
  const sh = (...args) => execFileSync(bin, args, { encoding: 'utf8' })
  sh('new-session', '-d', '-s', session, '-x', '150', '-y', '30', `${JSON.stringify(process.execPath)} ${JSON.stringify(BIN)} top ${JSON.stringify(URL_)} --prefix ${JSON.stringify(p)}; echo "top exited with $?"; sleep 30`)
  t.after(() => { try { sh('kill-session', '-t', session) } catch {} })
  const screen = () => sh('capture-pane', '-p', '-t', session)
  await eventually(() => screen().includes(`${p}first`), 15_000, 'the first frame')
  const second = await locks.acquire(`${p}second`, { ttl: 60_000 })
  await eventually(() => screen().includes(`${p}second`), 15_000, 'a redraw with the new lock')
  // Held since about when this view saw it appear (no ≥), while the first one shows a lower bound.
  await eventually(() => /≥/.test(columnsOf(screen(), `${p}first`)[4] ?? ''), 15_000, 'a lower bound for the first lock')
  assert.doesNotMatch(columnsOf(screen(), `${p}second`)[4], /≥|–/)
  // Only one frame on the screen: it is redrawn in place.
  assert.equal(screen().split('deadbolt top').length - 1, 1)
  sh('send-keys', '-t', session, 'C-c')
  await eventually(() => screen().includes('top exited with 0'), 15_000, 'top to quit')
  await first.release()
  await second.release()
})

test('top refuses an --interval that is not a positive whole number, naming it (exit 2)', () => {
  for (const value of ['0', '-5', '1.5', 'soon']) {
    const r = cli('top', URL_, '--interval', value, '--once')
    assert.equal(r.code, 2, value)
    assert.match(r.err, /--interval needs a positive whole number/, value)
  }
})

test('top refuses a --prefix, --semaphore or --election without a value, naming it (exit 2)', () => {
  for (const flag of ['--prefix', '--semaphore', '--election']) {
    const r = cli('top', URL_, '--once', flag)
    assert.equal(r.code, 2, flag)
    assert.ok(r.err.includes(`${flag} needs a`), r.err)
  }
})

test('top shows the bare owner token as the holder of a lock whose owner carries no identity', async (t) => {
  const locks = await client(t, { identity: false })
  const p = prefix('top')
  const lock = await locks.acquire(`${p}bare`)
  const r = cli('top', URL_, '--once', '--prefix', p)
  assert.equal(r.code, 0, r.err)
  assert.equal(columnsOf(r.out, `${p}bare`)[1], lock.owner)
  await lock.release()
})

test('top shows – for the token of a lock in the redislock wire format, which has none', async (t) => {
  const { REDIS_URL, needRedis } = require('./helpers')
  if (!(await needRedis(t))) return
  const { createLock } = require('..')
  const p = prefix('top')
  const key = `${p}redislock`
  const lock = createLock(REDIS_URL)
  await lock.acquire(key)
  t.after(() => lock.release())
  const r = cli('top', REDIS_URL, '--once', '--prefix', p)
  assert.equal(r.code, 0, r.err)
  const [, holder, token] = columnsOf(r.out, key)
  assert.deepEqual([holder, token], [lock._id, '–'])
})

test('a live top says when the store fails and shows the locks again once it answers', { timeout: 60_000 }, async (t) => {
  const { startRedis } = require('./fixtures/redis-server')
  let server = await startRedis()
  t.after(() => server.kill())
  const url = server.url
  const locks = await connect(url, { responseTimeout: 500, connectTimeout: 500 })
  t.after(() => locks.close().catch(() => {}))
  const p = prefix('top')
  await locks.acquire(`${p}up`, { ttl: 60_000 })
  const top = spawn(process.execPath, [BIN, 'top', url, '--json', '--interval', '100', '--prefix', p], { stdio: ['ignore', 'pipe', 'pipe'] })
  t.after(() => top.kill('SIGKILL'))
  const frames = []
  let rest = ''
  top.stdout.setEncoding('utf8')
  top.stdout.on('data', (d) => {
    const lines = (rest + d).split('\n')
    rest = lines.pop()
    for (const l of lines) frames.push(JSON.parse(l))
  })
  await eventually(() => frames.some((f) => f.locks?.length === 1), 15_000, 'a frame with the lock')
  await server.kill()
  await eventually(() => frames.some((f) => f.error), 15_000, 'a frame saying the store failed')
  const failure = frames.find((f) => f.error).error
  assert.equal(failure.code, 'ERR_LOCK_BACKEND')
  assert.equal(top.exitCode, null, 'top keeps running')
  const seen = frames.length
  server = await startRedis(server.port)
  // A fresh server holds nothing: the lock is taken again there for top to show.
  const again = await connect(url)
  t.after(() => again.close())
  await again.acquire(`${p}up`, { ttl: 60_000 })
  await eventually(() => frames.slice(seen).some((f) => f.locks?.length === 1), 20_000, 'the locks shown again')
  top.kill('SIGINT')
  await new Promise((resolve) => top.once('exit', resolve))
  assert.equal(top.exitCode, 0)
})

test('top --once shows the last run of each scheduled job under the prefix', async (t) => {
  const locks = await client(t, { name: 'top-jobs' })
  const p = prefix('top')
  await locks.runOnce(`${p}nightly`, () => {})
  const r = cli('top', URL_, '--once', '--prefix', p)
  assert.equal(r.code, 0, r.err)
  assert.match(r.out, /JOBS \(1\)/)
  const [name, outcome, started, took, by, next] = columnsOf(r.out, `${p}nightly`)
  assert.deepEqual([name, outcome, by, next], [`${p}nightly`, 'ran', `top-jobs@${os.hostname()}/${process.pid}`, '–'])
  assert.match(started, /^[0-9.]+s ago$/)
  assert.match(took, /^[0-9.]+s$/)
  const frame = JSON.parse(cli('top', URL_, '--once', '--json', '--prefix', p).out)
  assert.deepEqual(frame.jobs.map((j) => [j.name, j.outcome, j.holder.name]), [[`${p}nightly`, 'ran', 'top-jobs']])
})

test('top says when more locks are held than --limit shows, in text and in --json', async (t) => {
  const locks = await client(t)
  const p = prefix('top')
  for (const k of ['a', 'b', 'c']) await locks.acquire(`${p}${k}`, { ttl: 60_000 })
  const text = cli('top', URL_, '--once', '--prefix', p, '--limit', '2')
  assert.equal(text.code, 0, text.err)
  assert.match(text.out, /^LOCKS \(2 shown; more are held: --limit shows more\)$/m)
  const json = JSON.parse(cli('top', URL_, '--once', '--json', '--prefix', p, '--limit', '2').out)
  assert.deepEqual([json.locks.length, json.more], [2, true])
  const all = JSON.parse(cli('top', URL_, '--once', '--json', '--prefix', p, '--limit', '3').out)
  assert.deepEqual([all.locks.length, all.more], [3, false])
})

test('top refuses an --interval beyond what a timer can wait, naming the unit (exit 2)', () => {
  const r = cli('top', URL_, '--interval', '3000000000')
  assert.equal(r.code, 2)
  assert.match(r.err, /--interval is at most 2147483647 ms/)
  assert.equal(cli('top', URL_, '--limit', '1000001').code, 2)
})
