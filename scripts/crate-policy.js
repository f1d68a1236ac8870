#!/usr/bin/env node
'use strict'
// The licence and ban check of `npm test`: every crate linked into the shipped addon is under a
// licence deny.toml allows, none of deny.toml's banned crates is in the graph, and no crate comes
// in two versions unless deny.toml's `skip` names it. deny.toml stays the one policy (the same
// file `cargo deny check licenses bans` reads, for those who have cargo-deny); this reads it with
// a TOML parser and the graph from `cargo metadata --offline --locked`, so a fresh machine needs
// nothing more than cargo and the npm dev dependencies.
// Usage: node scripts/crate-policy.js [--metadata FILE]   (FILE: `cargo metadata` JSON, for tests)
const { execFileSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { parse: parseToml } = require('smol-toml')

const root = path.join(__dirname, '..')

/** Splits an SPDX expression into tokens: ids, `(`, `)`, AND, OR, WITH; `/` is the old OR. */
function tokens(expression) {
  return expression
    .replace(/\//g, ' OR ')
    .replace(/([()])/g, ' $1 ')
    .trim()
    .split(/\s+/)
}

/**
 * Whether an SPDX licence expression is satisfied by the allowed ids: OR needs one side, AND
 * both, `X WITH exception` only when deny.toml allows it as such. Precedence as SPDX: WITH, then AND, then OR.
 */
function satisfied(expression, allowed) {
  const t = tokens(expression)
  let i = 0
  const fail = (why) => {
    throw new Error(`cannot read the licence expression ${JSON.stringify(expression)}: ${why}`)
  }
  const primary = () => {
    const tok = t[i++]
    if (tok === '(') {
      const v = or()
      if (t[i++] !== ')') fail('missing )')
      return v
    }
    if (tok === undefined || ['AND', 'OR', 'WITH', ')'].includes(tok)) fail(`unexpected ${tok}`)
    if (t[i] !== 'WITH') return allowed.has(tok)
    i += 1
    const exception = t[i++]
    if (exception === undefined) fail('WITH without an exception')
    return allowed.has(`${tok} WITH ${exception}`)
  }
  const and = () => {
    let v = primary()
    while (t[i] === 'AND') {
      i += 1
      v = primary() && v
    }
    return v
  }
  const or = () => {
    let v = and()
    while (t[i] === 'OR') {
      i += 1
      v = and() || v
    }
    return v
  }
  const v = or()
  if (i !== t.length) fail(`unexpected ${t[i]}`)
  return v
}

/** The packages the addon links on any published target: normal and build edges, no dev edges. */
function shippedPackages(metadata, rootId) {
  const nodes = new Map(metadata.resolve.nodes.map((n) => [n.id, n]))
  const byId = new Map(metadata.packages.map((p) => [p.id, p]))
  const seen = new Set()
  const stack = [rootId]
  while (stack.length) {
    const id = stack.pop()
    if (seen.has(id)) continue
    seen.add(id)
    for (const dep of nodes.get(id).deps) {
      if (dep.dep_kinds.some((k) => k.kind !== 'dev')) stack.push(dep.pkg)
    }
  }
  return [...seen].map((id) => byId.get(id))
}

/** Every breach of the policy, as sentences; empty when the graph complies. */
function breaches(policy, metadata) {
  const rootId = metadata.resolve.root ?? metadata.workspace_members[0]
  const packages = shippedPackages(metadata, rootId).filter((p) => p.id !== rootId)
  const allowed = new Set(policy.licenses.allow)
  const out = []
  for (const p of packages) {
    if (!p.license) out.push(`${p.name}@${p.version}: no licence field (add a clarification)`)
    else if (!satisfied(p.license, allowed)) {
      out.push(`${p.name}@${p.version}: licence ${p.license} is not allowed by deny.toml`)
    }
  }
  const banned = new Set((policy.bans.deny ?? []).map((d) => d.name ?? d.crate))
  for (const p of packages) {
    if (banned.has(p.name)) out.push(`${p.name}@${p.version}: banned by deny.toml`)
  }
  if (policy.bans['multiple-versions'] === 'deny') {
    const skipped = new Set((policy.bans.skip ?? []).map((s) => s.crate ?? `${s.name}@${s.version}`))
    const versions = new Map()
    for (const p of packages) versions.set(p.name, [...(versions.get(p.name) ?? []), p.version])
    for (const [name, list] of versions) {
      const unexplained = list.filter((v) => !skipped.has(`${name}@${v}`))
      if (unexplained.length > 1) {
        out.push(`${name}: versions ${list.sort().join(', ')} and deny.toml skips too few of them`)
      }
    }
  }
  return out
}

function metadataFor(targets) {
  const args = ['metadata', '--format-version', '1', '--offline', '--locked']
  for (const t of targets) args.push('--filter-platform', t)
  return JSON.parse(execFileSync('cargo', args, { cwd: root, maxBuffer: 256 << 20 }))
}

function main() {
  const policy = parseToml(fs.readFileSync(path.join(root, 'deny.toml'), 'utf8'))
  const at = process.argv.indexOf('--metadata')
  const metadata =
    at > 0
      ? JSON.parse(fs.readFileSync(process.argv[at + 1], 'utf8'))
      : metadataFor(policy.graph.targets)
  const found = breaches(policy, metadata)
  const count = shippedPackages(metadata, metadata.resolve.root ?? metadata.workspace_members[0]).length - 1
  if (found.length) {
    for (const line of found) console.error(`crate policy: ${line}`)
    process.exit(1)
  }
  console.log(`crate policy: ${count} crates, licences allowed, no banned crate, no unexplained duplicate`)
}

if (require.main === module) main()

module.exports = { satisfied, breaches }
