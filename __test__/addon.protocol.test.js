'use strict'
// An addon built from other Rust sources than lib/ (a clone rebuilt in part, an old binary
// copied in) is refused at load rather than misread: a child process loads the package with
// the real addon's protocol less one field, as an older build's would be.

const test = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const { execFileSync } = require('node:child_process')

const ROOT = path.join(__dirname, '..')

/**
 * What `require('deadbolt')` does in a child whose addon's protocol lacks `field` (a name of
 * the protocol, or `fields.<name>` for a field of its record layout).
 */
function loadWithout(field) {
  const [outer, inner] = field.split('.')
  const drop = inner === undefined ? `delete p[${JSON.stringify(outer)}]` : `delete p[${JSON.stringify(outer)}][${JSON.stringify(inner)}]`
  const script = `
    const binding = require(${JSON.stringify(path.join(ROOT, 'binding.js'))})
    const real = binding.protocol
    binding.protocol = () => { const p = real(); ${drop}; return p }
    try { require(${JSON.stringify(ROOT)}); console.log(JSON.stringify({ loaded: true })) } catch (err) {
      console.log(JSON.stringify({ code: err.code, message: err.message }))
    }
  `
  return JSON.parse(execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' }).trim())
}

test('an addon whose protocol lacks a field lib/ reads is refused at load with ERR_LOCK_NO_BINARY naming it', () => {
  const out = loadWithout('kindGrantedLate')
  assert.equal(out.loaded, undefined, 'the package loaded with a mismatched addon')
  assert.equal(out.code, 'ERR_LOCK_NO_BINARY')
  assert.match(out.message, /kindGrantedLate/)
  assert.match(out.message, /rebuild/)
})

test('an addon whose record layout lacks a field lib/ writes is refused at load with ERR_LOCK_NO_BINARY naming it', () => {
  // An older build's acquire record has no key length: its keys came as an array of strings.
  const out = loadWithout('fields.keyLen')
  assert.equal(out.loaded, undefined, 'the package loaded with a mismatched addon')
  assert.equal(out.code, 'ERR_LOCK_NO_BINARY')
  assert.match(out.message, /keyLen/)
})

test('the addon built from these sources loads', () => {
  assert.deepEqual(loadWithout('noSuchField'), { loaded: true })
})
