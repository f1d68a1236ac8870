'use strict'
// Debug logging: on with DEBUG=deadbolt:* or NODE_DEBUG=deadbolt, from the native engine and
// from JavaScript; silent otherwise; never a password.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const path = require('node:path')

const PROGRAM = `
const { connect } = require('.')
;(async () => {
  const l = await connect('memory://user:S3cretPw@debug-test')
  const a = await l.acquire('k')
  const waiting = l.acquire('k')
  setTimeout(() => a.release(), 20)
  await (await waiting).release()
  const short = await l.acquire('e', { ttl: 30 })
  short.signal
  await new Promise((r) => setTimeout(r, 100))
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
    assert.match(err, /^DEADBOLT \d+: lock "e" lost \(expired\)/m, 'from JavaScript')
    assert.ok(!err.includes('S3cretPw'), 'no password in the log')
  })
}

test('without DEBUG or NODE_DEBUG nothing is printed', () => {
  assert.equal(run({}), '')
})
