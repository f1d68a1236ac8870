'use strict'
// Debug logging: on with DEBUG=deadbolt:* or NODE_DEBUG=deadbolt, from the native engine and
// from JavaScript; silent otherwise; never a password.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawn, spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { connect } = require('..')
const { eventually } = require('./helpers')

const PROGRAM = `
const { connect } = require('.')
;(async () => {
  const l = await connect('memory://user:S3cretPw@debug-test')
  const a = await l.acquire('k')
  const waiting = l.acquire('k')
  setTimeout(() => a.release(), 20)
  await (await waiting).release()
  const short = await l.acquire('e', { ttl: 100 })
  short.signal
  await new Promise((r) => setTimeout(r, 300))
  await l.close()
})()
`

function run(env) {
  const r = spawnSync(process.execPath, ['-e', PROGRAM], {
    cwd: path.join(__dirname, '..'),
    encoding: 'utf8',
    timeout: 30_000,
    env: { ...process.env, DEBUG: '', NODE_DEBUG: '', ...env },
  })
  assert.equal(r.status, 0, r.stderr)
  return r.stderr
}

for (const env of [{ DEBUG: 'deadbolt:*' }, { NODE_DEBUG: 'deadbolt' }]) {
  test(`${Object.entries(env)[0].join('=')} prints acquisitions, handoffs and losses from both layers`, () => {
    const err = run(env)
    assert.match(err, /^DEADBOLT \d+: acquire "k": granted, token \d+$/m)
    assert.match(err, /^DEADBOLT \d+: acquire "k": busy$/m)
    assert.match(err, /^DEADBOLT \d+: handoff "k": to the next local waiter/m)
    assert.match(err, /^DEADBOLT \d+: lost "e": Expired$/m, 'from the native engine')
    assert.match(err, /^DEADBOLT \d+: lost "e": the lock object learns it \(expired\)/m, 'from JavaScript')
    assert.ok(!err.includes('S3cretPw'), 'no password in the log')
  })
}

test('without DEBUG or NODE_DEBUG nothing is printed', () => {
  assert.equal(run({}), '')
})

test('DEBUG=deadbolt:acquire prints the acquire lines only', () => {
  const lines = run({ DEBUG: 'deadbolt:acquire' }).trim().split('\n')
  assert.ok(lines.some((l) => /: acquire "k": granted/.test(l)), lines.join('\n'))
  assert.deepEqual(lines.filter((l) => !/^DEADBOLT \d+: acquire /.test(l)), [])
})

test('DEBUG excludes a namespace written with a leading -, on both layers', () => {
  const err = run({ DEBUG: 'deadbolt:*,-deadbolt:lost' })
  assert.match(err, /^DEADBOLT \d+: handoff "k"/m)
  assert.doesNotMatch(err, /^DEADBOLT \d+: lost /m)
  assert.equal(run({ DEBUG: 'deadbolt,-deadbolt:*' }), '')
})

test('a waiting acquisition is summed up in one line at its grant, not a line per poll', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-debug-'))
  const url = `sqlite://${path.join(dir, 'locks.db')}`
  const locks = await connect(url)
  try {
    const held = await locks.acquire('w', { ttl: 500, autoExtend: true, onLost() {} })
    const program = `
      const { connect } = require('.')
      ;(async () => {
        const locks = await connect(process.argv[1])
        await (await locks.acquire('w', { retryDelay: 5, jitter: 0, wait: 20000 })).release()
        await locks.close()
      })()`
    const child = spawn(process.execPath, ['-e', program, url], { cwd: path.join(__dirname, '..'), stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, NODE_DEBUG: '', DEBUG: 'deadbolt:acquire' } })
    let err = ''
    child.stderr.on('data', (d) => { err += d })
    const exited = new Promise((resolve) => child.once('exit', resolve))
    // Once it waits, the lease is let run out: the waiter polls every 5 ms for about 500 ms.
    await eventually(() => err.includes(': busy'), 15_000, 'the waiter to be refused')
    held.stopExtending()
    assert.equal(await exited, 0, err)
    const lines = err.split('\n').filter((l) => l.includes('acquire "w"'))
    assert.equal(lines.filter((l) => l.endsWith(': busy')).length, 1, lines.join('\n'))
    assert.match(lines.at(-1), /acquire "w": granted, token \d+, at attempt \d+ after \d+ ms waiting$/)
    assert.equal(lines.length, 2, lines.join('\n'))
  } finally {
    await locks.close()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})
