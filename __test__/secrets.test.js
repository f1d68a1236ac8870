'use strict'
// No secret ever appears in an error, util.inspect or JSON: not the password of a URL.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const util = require('node:util')
const { connect, createLock } = require('..')
const { REDIS_URL, needRedis, needMysql, prefix } = require('./helpers')

const SECRET = 'S3cr3t-pa55'

function assertClean(text, what) {
  assert.equal(typeof text, 'string')
  assert.ok(!text.includes(SECRET), `${what} shows the password: ${text}`)
}

function errorText(err) {
  return [err.message, err.stack, util.inspect(err, { depth: 5 }), err.cause && util.inspect(err.cause, { depth: 5 })].join('\n')
}

test('util.inspect and JSON of a client and a lock never show the password', async () => {
  // A lazy client does no I/O, so the URL needs no server behind it.
  const lazy = await connect(`mysql://root:${SECRET}@127.0.0.1:1/test`, { lazy: true })
  assertClean(util.inspect(lazy, { depth: 10, showHidden: true }), 'util.inspect(client)')
  assertClean(JSON.stringify(lazy), 'JSON.stringify(client)')
  assert.match(util.inspect(lazy), /\*\*\*/)
  await lazy.close()
  const locks = await connect(`mysql://root:${SECRET}@127.0.0.1:1/test`, { lazy: true })
  // A memory store's name is free text, so its URL can carry a password too.
  const memory = await connect(`memory://user:${SECRET}@secrets`)
  const lock = await memory.acquire(prefix('secret') + 'k')
  assertClean(util.inspect(lock, { depth: 10, showHidden: true }), 'util.inspect(lock)')
  assert.doesNotThrow(() => JSON.stringify(lock))
  assert.deepEqual(Object.keys(JSON.parse(JSON.stringify(lock))).sort(), ['fencingToken', 'held', 'key', 'owner', 'ttl'])
  await locks.close()
  await memory.close()
})

test('the error for an unsupported scheme does not echo the URL', async () => {
  await assert.rejects(connect(`foo://user:${SECRET}@host/db`), (err) => {
    assert.equal(err.code, 'ERR_INVALID_ARG_VALUE')
    assertClean(errorText(err), 'the error')
    return true
  })
  assert.throws(() => createLock(`foo://user:${SECRET}@host`), (err) => {
    assertClean(errorText(err), 'the redislock face error')
    return true
  })
})

test("an unparsable URL in a redislock client's options does not show the password, not even in the cause", () => {
  assert.throws(() => createLock({ url: `redis://user:${SECRET}@[bad` }), (err) => {
    assert.equal(err.code, 'ERR_INVALID_ARG_VALUE')
    assert.equal(err.cause.code, 'ERR_INVALID_URL')
    assertClean(errorText(err), 'the error')
    return true
  })
})

test('a MySQL login refused with a wrong password does not show the password', async (t) => {
  if (!(await needMysql(t))) return
  await assert.rejects(connect(`mysql://nobody-${prefix('u').slice(-6)}:${SECRET}@127.0.0.1:3306/test`, { connectTimeout: 3000 }), (err) => {
    assert.equal(err.code, 'ERR_LOCK_BACKEND')
    assertClean(errorText(err), 'the error')
    return true
  })
})

test('a Redis login refused with a wrong password does not show the password', async (t) => {
  if (!(await needRedis(t))) return
  const u = new URL(REDIS_URL)
  await assert.rejects(connect(`redis://nobody:${SECRET}@${u.host}`, { connectTimeout: 3000 }), (err) => {
    assert.equal(err.code, 'ERR_LOCK_BACKEND')
    assertClean(errorText(err), 'the error')
    return true
  })
})

test('Redlock: no server password shows in util.inspect, JSON or a refused login, and a bad server URL is named by position only', async (t) => {
  if (!(await needRedis(t))) return
  const u = new URL(REDIS_URL)
  const servers = [REDIS_URL, `redis://nobody:${SECRET}@${u.host}`, `redis://:${SECRET}-2@127.0.0.1:1`]
  const lazy = await connect(servers, { lazy: true })
  assertClean(util.inspect(lazy, { depth: 10, showHidden: true }), 'util.inspect(client)')
  assertClean(JSON.stringify(lazy), 'JSON.stringify(client)')
  await lazy.close()
  // Two of three refuse: no quorum, and the error names no password.
  await assert.rejects(connect(servers, { connectTimeout: 2000 }), (err) => {
    assert.equal(err.code, 'ERR_LOCK_BACKEND')
    assertClean(errorText(err), 'the error')
    return true
  })
  await assert.rejects(connect([REDIS_URL, `mysql://root:${SECRET}@h/db`]), (err) => {
    assert.equal(err.code, 'ERR_INVALID_ARG_VALUE')
    assert.match(err.message, /url\[1\]/)
    assertClean(errorText(err), 'the error')
    return true
  })
})

test('Sentinel: the primary\'s password never shows in util.inspect, JSON or an error', async () => {
  const target = { sentinels: [`redis://:${SECRET}-s@127.0.0.1:1`], name: 'mymaster', password: SECRET }
  const lazy = await connect(target, { lazy: true })
  assertClean(util.inspect(lazy, { depth: 10, showHidden: true }), 'util.inspect(client)')
  assertClean(JSON.stringify(lazy), 'JSON.stringify(client)')
  await lazy.close()
  await assert.rejects(connect(target, { connectTimeout: 500, responseTimeout: 500 }), (err) => {
    assert.equal(err.code, 'ERR_LOCK_BACKEND')
    assertClean(errorText(err), 'the error')
    return true
  })
  await assert.rejects(connect({ ...target, password: 42 }), (err) => {
    assert.equal(err.code, 'ERR_INVALID_ARG_VALUE')
    assertClean(errorText(err), 'the error')
    return true
  })
})

// top and the dashboard, run as a user runs them, over a throwaway redis-server with a user
// whose password is SECRET (the shared server is never reconfigured).

const BIN = require('node:path').join(__dirname, '..', 'bin', 'deadbolt.js')

/** A throwaway redis-server where user `alice` logs in with SECRET; its URL with the password. */
async function passwordRedis(t) {
  const { startRedis } = require('./fixtures/redis-server')
  const server = await startRedis(undefined, ['--user', 'alice', 'on', `>${SECRET}`, '~*', '&*', '+@all'])
  t.after(() => server.kill())
  return `redis://alice:${SECRET}@127.0.0.1:${server.port}`
}

function cli(...args) {
  const r = require('node:child_process').spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', timeout: 30_000 })
  return { code: r.status, out: r.stdout, err: r.stderr }
}

test('top shows a store reached with a password without the password, in text and JSON', async (t) => {
  if (!(await needRedis(t))) return
  const url = await passwordRedis(t)
  const locks = await connect(url)
  t.after(() => locks.close())
  const key = prefix('secret') + 'top'
  await locks.acquire(key)
  for (const args of [['--once'], ['--once', '--json']]) {
    const r = cli('top', url, '--prefix', key, ...args)
    assert.equal(r.code, 0, r.err)
    assert.ok(r.out.includes(key), r.out)
    assertClean(r.out + r.err, `top ${args.join(' ')}`)
  }
})

test('top and the dashboard do not show the password of a login the store refuses', async (t) => {
  if (!(await needRedis(t))) return
  const url = (await passwordRedis(t)).replace('alice:', 'mallory:')
  const r = cli('top', url, '--once')
  assert.equal(r.code, 3)
  assertClean(r.out + r.err, 'top')
  const d = await dashboard(t, url, [])
  const events = await firstEvent(d.url)
  assert.match(events, /event: failure/)
  assertClean(events, 'the failure event')
  assertClean(d.lines.join('\n') + d.stderr(), "the dashboard's output")
})

test("the dashboard's page, its events and a force-release's audit line show neither the password nor the page token", async (t) => {
  if (!(await needRedis(t))) return
  const url = await passwordRedis(t)
  const locks = await connect(url)
  t.after(() => locks.close())
  const key = prefix('secret') + 'dash'
  await locks.acquire(key, { ttl: 30_000 })
  const d = await dashboard(t, url, ['--allow-release', '--prefix', key])
  const page = await (await fetch(d.url)).text()
  assertClean(page, 'the page')
  const token = /"token":"([^"]+)"/.exec(page)[1]
  const events = await firstEvent(d.url)
  assert.ok(events.includes(key), events)
  assertClean(events, 'the events')
  const res = await fetch(new URL('/release', d.url), { method: 'POST', headers: { 'content-type': 'application/json', 'x-deadbolt-token': token }, body: JSON.stringify({ key }) })
  assert.equal(res.status, 200)
  const audit = await require('./helpers').eventually(() => d.lines.find((l) => l.includes('force-release')), 10_000, 'the audit line')
  assert.ok(audit.includes(key), audit)
  assertClean(audit, 'the audit line')
  assert.ok(!audit.includes(token), `the audit line shows the page token: ${audit}`)
  assertClean(d.lines.join('\n') + d.stderr(), "the dashboard's output")
})

/** Starts `deadbolt dashboard url` on a free port; resolves with { url, lines, stderr() }. */
async function dashboard(t, url, args) {
  const child = require('node:child_process').spawn(process.execPath, [BIN, 'dashboard', url, '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
  t.after(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  const lines = []
  let err = ''
  require('node:readline').createInterface({ input: child.stdout }).on('line', (l) => lines.push(l))
  child.stderr.on('data', (d) => { err += d })
  const line = await require('./helpers').eventually(() => lines.find((l) => l.startsWith('dashboard: ')), 15_000, `the dashboard's address (${err})`)
  return { url: line.slice('dashboard: '.length), lines, stderr: () => err }
}

/** The text of the dashboard's event stream up to its first event. */
async function firstEvent(pageUrl) {
  const ac = new AbortController()
  const res = await fetch(new URL('/events', pageUrl), { signal: ac.signal })
  const decoder = new TextDecoder()
  let text = ''
  for await (const chunk of res.body) {
    text += decoder.decode(chunk, { stream: true })
    if (/\ndata: .*\n\n/.test(text)) break
  }
  ac.abort()
  return text
}
