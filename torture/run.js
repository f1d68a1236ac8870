'use strict'
// The torture orchestrator: runs every scenario against every store of the table, prints one
// line of figures per scenario and `N passed, N failed`, and exits non-zero if any failed.
//
//   node torture/run.js [--short] [--store redis|mysql|sqlite] [--only name,name] [--json file]
//   npm run torture [-- --short]        (TORTURE_SHORT=1 also selects the short form)

const { randomBytes } = require('node:crypto')
const { STORES, sharedUp } = require('./stores')
const { SCENARIOS, applies } = require('./scenarios')
const { Harness, sleep } = require('./harness')
const { check } = require('./checker')

/** Throwaway servers the run reuses across scenarios (store.reuseServer). */
const reusable = new Map()

async function throwaway(store, opts = {}) {
  if (store.reuseServer) {
    let s = reusable.get(store.name)
    if (s) await s.ensureRunning()
    else { s = await store.Server.create(opts); reusable.set(store.name, s) }
    return { server: s, dispose: () => s.ensureRunning() }
  }
  const s = await store.Server.create(opts)
  return { server: s, dispose: () => s.destroy() }
}

async function disposeReusable() {
  for (const s of reusable.values()) await s.destroy().catch(() => {})
  reusable.clear()
}

function withTimeout(p, ms, what) {
  let timer
  return Promise.race([p, new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms) })])
    .finally(() => clearTimeout(timer))
}

/**
 * Runs one scenario on one store. Resolves { status: 'pass' | 'fail' | 'skip', figures,
 * violations, notes }. A missing server is a failure under CI and a skip elsewhere.
 */
async function runScenario(store, sc, { short = false } = {}) {
  const prefix = `deadbolt:torture:${randomBytes(5).toString('hex')}:`
  const h = new Harness({ store, prefix, short })
  const base = { store: store.name, scenario: sc.name, title: sc.title }
  const missing = (msg) => (process.env.CI ? { ...base, status: 'fail', violations: [msg], figures: null, notes: [] } : { ...base, status: 'skip', violations: [], reason: msg, figures: null, notes: [] })
  let server = null
  let url = store.url
  let serverHandle = null
  let isolation = null
  if (sc.server === 'own') {
    // The scenario starts its own server (ctx.throwaway) and sets ctx.raw.
    if (!store.Server.available()) return missing(`no ${store.name} server binary to start a throwaway server`)
  } else if (sc.server === 'shared') {
    if (!(await sharedUp(store))) return missing(`${store.name} is not answering at ${store.url}`)
    isolation = store.isolate(store.url, prefix.split(':')[2])
    url = isolation.url
    h.baseOpts = isolation.opts
  } else {
    if (!store.Server.available()) return missing(`no ${store.name} server binary to start a throwaway server`)
    try {
      serverHandle = await throwaway(store, {})
    } catch (err) {
      return { ...base, status: 'fail', violations: [`could not start a throwaway ${store.name}: ${err.message}`], figures: null, notes: [] }
    }
    server = serverHandle.server
    url = server.url
  }
  const raw = sc.server === 'own' ? null : isolation ? isolation.raw() : store.raw(url)
  const ctx = { h, store, short, server, url, raw, throwaway: (opts) => throwaway(store, opts) }
  let leftover = null
  try {
    try {
      await withTimeout(sc.run(ctx), (short ? 120 : 240) * 1000, `${sc.name} on ${store.name}`)
    } catch (err) {
      h.violate(`scenario aborted: ${err.message}`)
    }
    server?.resume()
    // Close every client that is still alive: closing releases what it holds.
    await Promise.all(h.workers.filter((w) => w.alive).map((w) => w.cmd('close', {}, { timeout: 15000 })
      .catch((err) => h.violate(`closing ${w.id}'s clients failed: ${err.message}`))))
    // Leases of killed holders run out by the store's clock: wait on the store, bounded.
    const waitMs = (h.maxTtl ?? 2000) + 3000
    const end = Date.now() + waitMs
    for (let i = 0; i < 1000; i++) {
      try {
        if (!ctx.raw) break
        const { extra } = await ctx.raw.leftover(prefix, [...h.names])
        leftover = extra.length
        h.leftoverNames = extra
        if (extra.length === 0 || Date.now() > end) break
      } catch (err) {
        if (Date.now() > end) { h.note(`leftover: ${err.message}`); break }
      }
      await sleep(100)
    }
  } finally {
    await h.stopWorkers()
    await ctx.raw?.cleanup(prefix).catch(() => {})
    await ctx.raw?.close().catch(() => {})
    await h.runCleanups()
    if (serverHandle) await serverHandle.dispose().catch(() => {})
  }
  if (process.env.TORTURE_DUMP) {
    // Every event and resource write of the scenario, one JSON line each, for a post-mortem.
    const fs = require('node:fs')
    fs.mkdirSync(process.env.TORTURE_DUMP, { recursive: true })
    const file = require('node:path').join(process.env.TORTURE_DUMP, `${store.name}-${sc.name}.jsonl`)
    const lines = [...h.faults.map((f) => ({ fault: true, ...f })), ...h.events, ...h.resource.log.map((r) => ({ resource: true, ...r }))]
    fs.writeFileSync(file, lines.map((l) => JSON.stringify(l, (k, v) => (typeof v === 'bigint' ? String(v) : v))).join('\n') + '\n')
  }
  const { figures, violations } = check(h, leftover)
  violations.unshift(...h.violations)
  return { ...base, status: violations.length ? 'fail' : 'pass', figures, violations, notes: h.notes }
}

const fmt = (v) => (v === null || v === undefined ? '-' : typeof v === 'number' && !Number.isInteger(v) ? v.toFixed(0) : String(v))

function line(r) {
  if (r.status === 'skip') return `${r.store.padEnd(6)} ${r.scenario.padEnd(22)} SKIP ${r.reason}`
  const f = r.figures ?? {}
  const cols = [
    r.store.padEnd(6), r.scenario.padEnd(22),
    `acq=${fmt(f.acquisitions)}`, `faults=${fmt(f.faults)}`, `overlaps=${fmt(f.overlaps)}`,
    `stale=${fmt(f.staleAccepted)}`, `tokenViol=${fmt(f.tokenViolations)}`, `losses=${fmt(f.losses)}`,
    `maxLossLateMs=${fmt(f.maxLossLatenessMs)}`, `takeoverMs=${fmt(f.takeoverMs)}`, `leftover=${fmt(f.leftover)}`,
    ...(f.failedCalls === null || f.failedCalls === undefined ? [] : [`failed=${f.failedCalls}`, `refused=${f.refused}`]),
    r.status.toUpperCase(),
  ]
  return cols.join(' ')
}

async function main(argv) {
  const short = argv.includes('--short') || /^(1|true|yes)$/i.test(process.env.TORTURE_SHORT ?? '')
  const arg = (name) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : undefined }
  const only = arg('--only')?.split(',')
  const storeName = arg('--store')
  const stores = STORES.filter((s) => !storeName || s.name === storeName)
  const scenarios = SCENARIOS.filter((s) => !only || only.includes(s.name))
  const started = Date.now()
  console.log(`deadbolt torture (${short ? 'short' : 'full'} form): ${scenarios.length} scenarios × ${stores.map((s) => s.name).join(', ')}`)
  const results = []
  let stop = false
  const onSig = () => { stop = true }
  process.once('SIGINT', onSig)
  try {
    for (const store of stores) {
      for (const sc of scenarios) {
        if (stop) break
        if (!applies(sc, store)) continue
        const r = await runScenario(store, sc, { short })
        results.push(r)
        console.log(line(r))
        for (const v of r.violations) console.log(`    ✗ ${v}`)
        for (const n of r.notes) console.log(`    · ${n}`)
      }
    }
  } finally {
    await disposeReusable()
  }
  const jsonOut = arg('--json')
  if (jsonOut) require('node:fs').writeFileSync(jsonOut, JSON.stringify(results, (k, v) => (typeof v === 'bigint' ? String(v) : v), 2))
  const passed = results.filter((r) => r.status === 'pass').length
  const failed = results.filter((r) => r.status === 'fail').length
  const skipped = results.filter((r) => r.status === 'skip').length
  console.log(`(${((Date.now() - started) / 1000).toFixed(0)} s${skipped ? `, ${skipped} skipped` : ''})`)
  console.log(`${passed} passed, ${failed} failed`)
  return failed === 0 ? 0 : 1
}

module.exports = { runScenario, disposeReusable, line }

if (require.main === module) {
  main(process.argv.slice(2)).then((code) => { process.exitCode = code }, (err) => { console.error(err); process.exitCode = 2 })
}
