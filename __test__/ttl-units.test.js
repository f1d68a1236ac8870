'use strict'
// ttl is in milliseconds: one below 100 ms (most likely seconds, `ttl: 30`) is taken as given,
// with one process warning that names the unit.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const path = require('node:path')

/** Runs `body` (with `connect` in scope) in a fresh process; resolves with its warnings. */
function warningsOf(body) {
  const program = `
    const { connect } = require('.')
    const warnings = []
    process.on('warning', (w) => warnings.push({ code: w.code, message: w.message }))
    ;(async () => {
      const locks = await connect('memory://ttl-units')
      ${body}
      await locks.close()
      await new Promise((resolve) => setImmediate(resolve))
      console.log(JSON.stringify(warnings))
    })()`
  const r = spawnSync(process.execPath, ['--no-warnings', '-e', program], { cwd: path.join(__dirname, '..'), encoding: 'utf8', timeout: 30_000 })
  assert.equal(r.status, 0, r.stderr)
  return JSON.parse(r.stdout)
}

test('a ttl below 100 ms warns once, in words that name milliseconds, and is taken as given', () => {
  const warnings = warningsOf(`
    const a = await locks.acquire('a', { ttl: 30, onLost() {} })
    if (a.ttl !== 30) throw new Error('ttl changed: ' + a.ttl)
    const b = await locks.acquire('b', { ttl: 50, onLost() {} })
    await a.release(); await b.release()`)
  assert.equal(warnings.length, 1, JSON.stringify(warnings))
  assert.equal(warnings[0].code, 'DEADBOLT_SHORT_TTL')
  assert.match(warnings[0].message, /ttl is in milliseconds: ttl 30 is a 30 ms lease, below 100 ms \(for 30 seconds, pass ttl: 30000\)/)
})

test('a ttl of 100 ms or more warns of nothing', () => {
  assert.deepEqual(warningsOf(`await (await locks.acquire('a', { ttl: 100 })).release()`), [])
})
