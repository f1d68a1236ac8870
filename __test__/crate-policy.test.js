'use strict'
// The licence and ban check `npm test` runs (scripts/crate-policy.js, reading deny.toml): it
// passes on the real crate graph and fails on each kind of breach.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const path = require('node:path')
const { satisfied, breaches } = require('../scripts/crate-policy')

const SCRIPT = path.join(__dirname, '..', 'scripts', 'crate-policy.js')

const policy = {
  licenses: { allow: ['MIT', 'Apache-2.0', 'Apache-2.0 WITH LLVM-exception'] },
  bans: { 'multiple-versions': 'deny', deny: [{ name: 'openssl-sys' }], skip: [{ crate: 'syn@1.0.0' }] },
}

/** A `cargo metadata` shape: root → each package, with the given edge kind. */
function graph(packages, kind = null) {
  const pkgs = [{ id: 'root', name: 'deadbolt', version: '0.1.0', license: 'MIT' }, ...packages]
  return {
    packages: pkgs,
    workspace_members: ['root'],
    resolve: {
      root: 'root',
      nodes: pkgs.map((p) => ({
        id: p.id,
        deps: p.id === 'root' ? packages.map((d) => ({ pkg: d.id, dep_kinds: [{ kind }] })) : [],
      })),
    },
  }
}
const pkg = (name, version, license) => ({ id: `${name}@${version}`, name, version, license })

test('the crate graph of the shipped addon complies with deny.toml', () => {
  const r = spawnSync(process.execPath, [SCRIPT], { encoding: 'utf8', timeout: 120_000 })
  assert.equal(r.status, 0, r.stderr)
  assert.match(r.stdout, /crate policy: \d+ crates/)
})

test('an SPDX expression is satisfied by one side of OR and by both sides of AND', () => {
  const allowed = new Set(policy.licenses.allow)
  assert.equal(satisfied('MIT OR GPL-3.0', allowed), true)
  assert.equal(satisfied('MIT AND GPL-3.0', allowed), false)
  assert.equal(satisfied('(MIT OR GPL-3.0) AND Apache-2.0', allowed), true)
  assert.equal(satisfied('Apache-2.0/MIT', allowed), true)
  assert.equal(satisfied('GPL-3.0 WITH LLVM-exception OR Apache-2.0 WITH LLVM-exception', allowed), true)
  assert.equal(satisfied('MIT WITH Classpath-exception-2.0', allowed), false)
  assert.throws(() => satisfied('MIT OR', allowed), /cannot read the licence expression/)
})

test('a crate under a licence deny.toml does not allow is a breach', () => {
  assert.deepEqual(breaches(policy, graph([pkg('gpl-thing', '1.0.0', 'GPL-3.0')])), [
    'gpl-thing@1.0.0: licence GPL-3.0 is not allowed by deny.toml',
  ])
})

test('a banned crate in the graph is a breach', () => {
  assert.deepEqual(breaches(policy, graph([pkg('openssl-sys', '0.9.0', 'MIT')])), ['openssl-sys@0.9.0: banned by deny.toml'])
})

test('two versions of one crate are a breach unless deny.toml skips one of them', () => {
  const two = [pkg('rand', '0.8.0', 'MIT'), pkg('rand', '0.9.0', 'MIT')]
  assert.equal(breaches(policy, graph(two)).length, 1)
  const skipped = [pkg('syn', '1.0.0', 'MIT'), pkg('syn', '2.0.0', 'MIT')]
  assert.deepEqual(breaches(policy, graph(skipped)), [])
})

test('a crate reached only through a dev dependency is not checked', () => {
  assert.deepEqual(breaches(policy, graph([pkg('gpl-thing', '1.0.0', 'GPL-3.0')], 'dev')), [])
})
