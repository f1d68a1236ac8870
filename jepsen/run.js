'use strict'
// `npm run jepsen`: seeded fault schedules against one store configuration and workload.
//
//   npm run jepsen -- --store <name|URL> --workload <w> --schedules N --seed S
//                     [--duration ms] [--actors n] [--per-process k] [--faults k] [--kinds k1,k2] [--lock unsafe|redlock|redis-semaphore]
//                     [--json FILE] [--append docs/guarantees.md] [--no-shrink] [--keep-going]
//
// Schedule i of a run with seed S has seed S + i: `--seed <S+i> --schedules 1` replays it, and
// `--faults k` keeps only its first k faults. Exit 0: no violation; 1: a violation; 2: a
// harness error (bad arguments, a server that did not start, a worker that crashed).

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { execFileSync } = require('node:child_process')
const { STORES, OPTS } = require('./stores')
const { schedule } = require('./schedule')
const { runSchedule } = require('./runner')
const { timeline } = require('./timeline')
const WORKLOADS = require('./workloads')

const USAGE = 'usage: npm run jepsen -- --store <memory|sqlite|redis|redlock|redlock5|sentinel|cluster|mysql|postgres|redis-clock|redlock-clock|mysql-clock|postgres-clock|etcd|etcd3|dynamodb|URL> --workload <mutex|semaphore|rwlock|election|handover|weblocks|acquireall|jobs|all> --schedules N --seed S [--duration ms] [--actors n] [--per-process k] [--faults k] [--kinds k1,k2] [--lock unsafe|redlock|redis-semaphore] [--json FILE] [--append FILE] [--no-shrink] [--keep-going]'

function parse(argv) {
  const o = { store: 'memory', workload: 'mutex', schedules: 5, seed: null, duration: 4000, actors: 4, perProcess: 1, faults: null, kinds: null, lock: 'real', json: null, append: null, shrink: true, quiet: false, keepGoing: false }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    const v = () => { const x = argv[++i]; if (x === undefined) throw new TypeError(`${a} needs a value`); return x }
    if (a === '--store') o.store = v()
    else if (a === '--workload') o.workload = v()
    else if (a === '--schedules') o.schedules = Number(v())
    else if (a === '--seed') o.seed = Number(v())
    else if (a === '--duration') o.duration = Number(v())
    else if (a === '--actors') o.actors = Number(v())
    else if (a === '--per-process') o.perProcess = Number(v())
    else if (a === '--faults') o.faults = Number(v())
    else if (a === '--kinds') o.kinds = v().split(',').filter(Boolean)
    else if (a === '--lock') o.lock = v()
    else if (a === '--json') o.json = v()
    else if (a === '--append') o.append = v()
    else if (a === '--no-shrink') o.shrink = false
    else if (a === '--quiet') o.quiet = true
    else if (a === '--keep-going') o.keepGoing = true
    else throw new TypeError(`unknown argument ${a}`)
  }
  if (!WORKLOADS[o.workload] && o.workload !== 'all') throw new TypeError(`unknown workload ${o.workload}`)
  if (o.workload === 'all' && o.lock !== 'real') throw new TypeError(`--workload all runs deadbolt's own lock only`)
  if (!['real', 'unsafe', 'redlock', 'redis-semaphore'].includes(o.lock)) throw new TypeError('--lock is real, unsafe, redlock or redis-semaphore')
  if (['unsafe', 'redlock'].includes(o.lock) && o.workload !== 'mutex') throw new TypeError(`--lock ${o.lock} runs the mutex workload only`)
  if (o.lock === 'redis-semaphore' && !['mutex', 'semaphore'].includes(o.workload)) throw new TypeError('--lock redis-semaphore runs the mutex and semaphore workloads only')
  for (const k of ['schedules', 'duration', 'actors', 'perProcess']) if (!Number.isInteger(o[k]) || o[k] < 1) throw new TypeError(`--${k === 'perProcess' ? 'per-process' : k} must be a positive integer`)
  if (o.perProcess > o.actors) throw new RangeError('--per-process cannot exceed --actors')
  o.seed ??= Math.floor(Math.random() * 1e9)
  if (!Number.isSafeInteger(o.seed)) throw new TypeError('--seed must be an integer')
  return o
}

/**
 * The workload schedule `seed` plays: the one named, or with `--workload all` every workload in
 * turn by seed (seed S + i plays the i-th of them, modulo), so a batch of one configuration
 * covers every primitive and `--seed <s> --schedules 1` replays the same one.
 */
function workloadOf(o, seed) {
  if (o.workload !== 'all') return o.workload
  const names = Object.keys(WORKLOADS)
  return names[((seed % names.length) + names.length) % names.length]
}

/** The environment of a registry name, or of a URL (no private server: no store faults). */
async function environment(store, lock) {
  if (lock === 'unsafe' && !['memory', 'redis'].includes(store)) throw new TypeError('--lock unsafe runs on memory or redis')
  if (lock === 'redlock' && !['redis', 'redlock'].includes(store)) throw new TypeError('--lock redlock runs on redis or redlock')
  if (lock === 'redis-semaphore' && !['redis', 'redlock'].includes(store)) throw new TypeError('--lock redis-semaphore runs on redis or redlock')
  const s = STORES[store]
  if (s) {
    if (!s.available()) throw new Error(`${store}: its server is not installed`)
    return s.start()
  }
  if (!/^[a-z0-9+]+:\/\//.test(store)) throw new TypeError(`unknown store ${store}`)
  return { url: () => store, endpoints: [], opts: OPTS, faults: ['pause-holder', 'kill-holder', 'stall'], servers: [], leftover: async () => [], stop: async () => {} }
}

/** How a row of the guarantees table names the lock under test. */
const LABEL = { real: '', unsafe: ' (unsafe control)', redlock: ' (deadbolt/redlock face)', 'redis-semaphore': ' (redis-semaphore face)' }

const JSONBIG = (k, v) => (typeof v === 'bigint' ? String(v) : v)

/**
 * The calls of a history as Jepsen writes them: one entry per call with its process, actor,
 * function, key, invoke time and outcome (ok, fail, or unknown when nothing came back).
 */
function operations(events) {
  const ops = new Map()
  for (const e of events) {
    if (e.ev === 'invoke') ops.set(e.id, { process: e.w, actor: e.a, f: e.f, key: e.key, invoke: e.t, type: 'unknown', complete: null })
    else if ((e.ev === 'ok' || e.ev === 'fail') && ops.has(e.id)) {
      const { ev, t, w, a, f, key, id, ...value } = e
      Object.assign(ops.get(id), { type: ev, complete: t, value })
    }
  }
  return [...ops.values()]
}

function commit() {
  try { return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: path.join(__dirname, '..'), encoding: 'utf8' }).trim() } catch { return 'unknown' }
}

/** Appends one row per fault kind of this batch to the guarantees table in `file`. */
function appendRows(file, o, results) {
  const kinds = new Map()
  for (const r of results) {
    const ks = new Set(r.faults.map((f) => f.kind))
    if (ks.size === 0) ks.add('none')
    if (o.workload === 'all') ks.add('(all kinds)')
    for (const k of ks) {
      const row = kinds.get(k) ?? { schedules: 0, ops: 0, violations: 0 }
      row.schedules++
      row.ops += r.figures.ops
      row.violations += r.violations.length ? 1 : 0
      kinds.set(k, row)
    }
  }
  const date = new Date().toISOString().slice(0, 10)
  const c = o.commit ?? commit()
  const name = o.workload === 'all' ? `all ${Object.keys(WORKLOADS).length} in turn` : o.workload
  const lines = [...kinds].sort().map(([k, r]) => `| ${o.store} | ${name}${LABEL[o.lock]}${o.kinds ? ` (only ${o.kinds.join(', ')})` : ''}${o.perProcess > 1 ? ` (${o.perProcess} actors a process)` : ''} | ${k} | ${r.schedules} | ${r.ops} | ${r.violations} | ${date} | ${c} | ${o.seed} |`)
  insertRows(file, lines)
}

/**
 * Puts `lines` at the end of the table under "## Batches" in `file` (the guarantees page has
 * sections after it), or at the end of the file when it has no such table.
 */
function insertRows(file, lines) {
  const text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : ''
  const all = text.split('\n')
  const heading = all.findIndex((l) => l.trim() === '## Batches')
  let at = -1
  if (heading >= 0) {
    let i = all.findIndex((l, k) => k > heading && l.startsWith('|'))
    if (i >= 0) {
      while (i + 1 < all.length && all[i + 1].startsWith('|')) i++
      at = i
    }
  }
  if (at < 0) { fs.appendFileSync(file, lines.join('\n') + '\n'); return }
  all.splice(at + 1, 0, ...lines)
  fs.writeFileSync(file, all.join('\n'))
}

/** Runs one schedule of seed `seed`, keeping only its first `keep` faults (all when null). */
async function one(env, o, seed, keep) {
  // A topology a previous schedule failed over starts whole again (observably: see
  // topologies.js), so that no schedule begins in the middle of another's heal.
  if (env.healthy) await env.healthy()
  const params = { ttl: env.ttl ?? 1000, wait: 2000, keys: 2, limit: 2 }
  const sched = schedule(seed, { kinds: o.kinds ?? env.faults, workers: env.inProcess ? 1 : Math.ceil(o.actors / o.perProcess), actors: o.actors, servers: env.servers.length, durationMs: o.duration, ttl: params.ttl })
  if (keep !== null) sched.faults = sched.faults.slice(0, keep)
  return runSchedule(env, sched, { storeName: o.store, workload: workloadOf(o, seed), lock: o.lock, actors: o.actors, perProcess: o.perProcess, durationMs: o.duration, params })
}

/** The faults a schedule played (a host clock step the harness found is not one). */
const played = (r) => r.faults.filter((x) => !x.found)

function describe(f) {
  return `${f.kind}@${f.at}ms+${f.ms}ms${f.target !== undefined ? `→${f.target}` : ''}`
}

async function main(argv) {
  let o
  try { o = parse(argv) } catch (err) { console.error(`${err.message}\n${USAGE}`); return 2 }
  const say = (s) => { if (!o.quiet) console.log(s) }
  // The commit the batch ran (HEAD may move while a long run goes on).
  o.commit = commit()
  say(`deadbolt jepsen: store ${o.store}, workload ${o.workload}, lock ${o.lock}, ${o.schedules} schedule(s) of ${o.duration} ms, seed ${o.seed}`)
  let env
  const t0 = Date.now()
  try { env = await environment(o.store, o.lock) } catch (err) { console.error(`harness error: ${err.message}`); return 2 }
  // `--kinds`: only these fault kinds (a narrower schedule than the store's; not the same
  // schedules as without it).
  const foreign = (o.kinds ?? []).filter((k) => !env.faults.includes(k))
  if (foreign.length) { console.error(`harness error: ${o.store} has no fault kind ${foreign.join(', ')} (it has ${env.faults.join(', ')})`); await env.stop().catch(() => {}); return 2 }
  const results = []
  let failed = null
  let harnessError = false
  try {
    for (let i = 0; i < o.schedules; i++) {
      const seed = o.seed + i
      const r = await one(env, o, seed, o.faults)
      results.push(r)
      const f = r.figures
      say(`schedule ${i + 1}/${o.schedules} seed ${seed}${o.workload === 'all' ? ` ${workloadOf(o, seed)}` : ''}: ${r.violations.length ? 'FAIL' : 'ok'} ops=${f.ops} grants=${f.grants} writes=${f.writes} refused=${f.refused} losses=${f.losses}${f.ticks === undefined ? '' : ` ticks=${f.ticks} missed=${f.missed} unexplained=${f.unexplained}`} ms=${f.ms} faults=[${played(r).map((x) => describe(x.planned ?? x)).join(' ')}]`)
      for (const v of r.violations) say(`    ✗ ${v}`)
      for (const n of r.notes) say(`    · ${n}`)
      if (r.harnessErrors) harnessError = true
      if (r.violations.length && !failed) failed = { r, seed }
      if (failed && !o.keepGoing) break
    }
    if (failed && o.shrink && !o.keepGoing) {
      // The shortest prefix of its faults that still fails (each prefix run once).
      const planned = played(failed.r).map((x) => x.planned)
      for (let k = 0; k < planned.length; k++) {
        const r = await one(env, o, failed.seed, k)
        say(`  shrink: first ${k} fault(s): ${r.violations.length ? 'still fails' : 'passes'}`)
        if (r.violations.length) { failed = { r, seed: failed.seed, keep: k }; break }
      }
    }
  } catch (err) {
    console.error(`harness error: ${err.stack}`)
    harnessError = true
  } finally {
    await env.stop().catch(() => {})
  }
  const elapsed = (Date.now() - t0) / 1000
  say(`${results.length} schedule(s), ${results.reduce((a, r) => a + r.figures.ops, 0)} operations, ${results.filter((r) => r.violations.length).length} failing, ${elapsed.toFixed(1)} s (${(results.reduce((a, r) => a + r.figures.ms, 0) / Math.max(1, results.length) / 1000).toFixed(1)} s a schedule)`)
  const json = o.json ?? (failed ? path.join(os.tmpdir(), `deadbolt-jepsen-${o.store.replace(/[^a-z0-9]/gi, '_')}-${workloadOf(o, failed.seed)}-${failed.seed}.json`) : null)
  if (json) {
    const pick = failed ? failed.r : results[results.length - 1]
    const doc = { store: o.store, workload: o.workload, lock: o.lock, seed: o.seed, failingSeed: failed?.seed ?? null, shrunkToFaults: failed?.keep ?? null, replay: failed ? `npm run jepsen -- --store ${o.store} --workload ${workloadOf(o, failed.seed)}${o.lock === 'real' ? '' : ` --lock ${o.lock}`}${o.kinds ? ` --kinds ${o.kinds.join(',')}` : ''} --schedules 1 --seed ${failed.seed} --duration ${o.duration} --actors ${o.actors}${o.perProcess > 1 ? ` --per-process ${o.perProcess}` : ''}${failed.keep !== undefined ? ` --faults ${failed.keep}` : ''}` : null, schedules: results.map((r) => ({ seed: r.seed, violations: r.violations, figures: r.figures, faults: r.faults })), history: pick ? { seed: pick.seed, violations: pick.violations, faults: pick.faults, operations: operations(pick.events), events: pick.events, register: pick.register } : null }
    fs.writeFileSync(json, JSON.stringify(doc, JSONBIG, 1))
    if (pick) {
      const svg = json.replace(/\.json$/, '') + '.svg'
      fs.writeFileSync(svg, timeline(pick, `${o.store} ${workloadOf(o, pick.seed)} seed ${pick.seed}${failed ? ' FAIL' : ''}`))
      say(`history: ${json}\ntimeline: ${svg}`)
    }
  }
  if (o.append) appendRows(o.append, o, results)
  if (failed) {
    const faults = played(failed.r)
    const all = faults.map((x) => describe(x.planned ?? x)).join(' ')
    say(`FAIL: seed ${failed.seed}, shortest failing prefix: ${failed.keep !== undefined ? failed.keep : o.shrink ? `all ${faults.length}` : 'not shrunk,'} fault(s) [${all}]`)
    say(`replay: npm run jepsen -- --store ${o.store} --workload ${workloadOf(o, failed.seed)}${o.lock === 'real' ? '' : ` --lock ${o.lock}`}${o.kinds ? ` --kinds ${o.kinds.join(',')}` : ''} --schedules 1 --seed ${failed.seed} --duration ${o.duration} --actors ${o.actors}${o.perProcess > 1 ? ` --per-process ${o.perProcess}` : ''}${failed.keep !== undefined ? ` --faults ${failed.keep}` : ''}`)
    return 1
  }
  return harnessError ? 2 : 0
}

module.exports = { main, parse, workloadOf, insertRows }

if (require.main === module) {
  main(process.argv.slice(2)).then((code) => { process.exitCode = code; setTimeout(() => process.exit(code), 2000).unref() }, (err) => { console.error(err); process.exitCode = 2 })
}
