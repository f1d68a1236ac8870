'use strict'
// Runs one schedule: relays and workers for it, the workload, the nemesis, then heals
// everything, stops the workers (each actor ends its round and releases), waits out the
// leases of killed holders, reads what is left in the store, and checks the history.

const path = require('node:path')
const { randomBytes } = require('node:crypto')
const { Harness, WorkerHandle, now, sleep } = require('../torture/harness')
const { Resource } = require('../torture/resource')
const { faultyProxy } = require('./proxy')
const { Nemesis } = require('./nemesis')
const { check } = require('./checker')
const { HostClockWatch } = require('./hostclock')
const WORKLOADS = require('./workloads')

const SCRIPT = path.join(__dirname, 'worker.js')

/** The register, logging the writing actor (several may share one process). */
class ActorResource extends Resource {
  offer(w, m) { return super.offer(m.a ?? w, m) }
}

/**
 * Runs schedule `sched` on environment `env`. `o`: { workload, lock, actors, perProcess,
 * durationMs, params }: `perProcess` actors share each worker process (and so, with one URL,
 * one engine: their acquisitions of a key queue locally and are handed over). Resolves { violations, figures, history, faults, notes }.
 */
/**
 * Waits until the store answers a client of the harness directly (not through a relay): a
 * server killed and restarted by the previous schedule may still be recovering (PostgreSQL
 * replays its WAL, MariaDB its redo log), and a worker that connects then fails at start,
 * which is the harness's state, not a finding. Gives up after 60 s (a harness error).
 */
async function storeAnswers(env) {
  for (const s of env.servers) await s.ensure().catch(() => {})
  if (env.inProcess || env.endpoints.length === 0) return
  const { connect } = require('..')
  const until = Date.now() + 60_000
  for (;;) {
    let c = null
    try {
      c = await connect(env.url(env.endpoints), env.opts)
      await c.ping()
      return
    } catch (err) {
      if (Date.now() > until) throw new Error(`the store did not answer before the schedule: ${err.message}`)
      await sleep(250)
    } finally {
      if (c !== null) await c.close().catch(() => {})
    }
  }
}

async function runSchedule(env, sched, o) {
  await storeAnswers(env)
  const prefix = `jepsen:${randomBytes(4).toString('hex')}:`
  const h = new Harness({ store: { name: o.storeName }, prefix })
  h.resource = new ActorResource(now)
  const model = WORKLOADS[o.workload].model
  const params = { ...o.params, ttl: env.ttl ?? o.params.ttl }
  const perProcess = o.perProcess ?? 1
  const nWorkers = env.inProcess ? 1 : Math.ceil(o.actors / perProcess)
  const workers = []
  let gen = 0
  const cfgFor = (i, actors) => ({ url: env.url(workers[i].proxies.slice(0, env.endpoints.length).map((p) => p.port)), opts: env.opts, workload: o.workload, lock: o.lock, prefix, params, actors })
  const spawn = async (i, actors) => {
    const handle = new WorkerHandle(h, `w${i}${gen ? `.${gen}` : ''}`, SCRIPT)
    h.workers.push(handle)
    workers[i].handle = handle
    await handle.ready
    await handle.cmd('start', cfgFor(i, actors), { timeout: 30000 })
  }
  const started = now()
  let runEnd = null
  const faultsPlayed = []
  // Steps of the host's wall clock, which every server's leases run on (jepsen/hostclock.js).
  const hostClock = new HostClockWatch(now).start()
  try {
    // A worker's relays: its own to each endpoint, then its view of each data server's shared
    // relay (a topology's servers announce those), which faults its connections only.
    for (let i = 0; i < nWorkers; i++) {
      const own = await Promise.all(env.endpoints.map((p) => faultyProxy(p)))
      workers.push({ proxies: [...own, ...(env.dataRelays ?? []).map((d) => d.view(i, () => workers[i].handle?.pid))] })
    }
    const actorsOf = (i, g) => (env.inProcess
      ? sched.actorSeeds.slice(0, o.actors).map((seed, k) => ({ id: `a${k}`, seed }))
      : sched.actorSeeds.slice(i * perProcess, Math.min(o.actors, (i + 1) * perProcess)).map((seed, k) => ({ id: `a${i * perProcess + k}${g ? `.${g}` : ''}`, seed: seed + g })))
    await Promise.all(workers.map((_, i) => spawn(i, actorsOf(i, 0))))
    const run = {
      h, env, workers,
      respawn: async (i) => { gen++; await spawn(i, actorsOf(i, gen)) },
    }
    const nemesis = new Nemesis(run)
    const t0 = now()
    nemesis.play(sched.faults)
    await sleep(o.durationMs)
    await nemesis.settled()
    faultsPlayed.push(...h.faults)
    // Heal whatever is left, then let every actor end its round.
    for (const w of workers) { w.handle.signal('SIGCONT'); for (const p of w.proxies) p.heal() }
    for (const s of env.servers) await s.ensure().catch(() => {})
    const stopBound = (params.wait ?? 0) + 3 * ((env.opts.connectTimeout ?? 5000) + (env.opts.responseTimeout ?? 5000)) * (env.boundFactor ?? 1) + 5000
    await Promise.all(workers.map((w) => w.handle.alive && w.handle.cmd('stop', {}, { timeout: stopBound })
      .catch((err) => h.violate(`${w.handle.id} did not stop: ${err.message}`))))
    runEnd = now()
    h.figures.workloadMs = runEnd - t0
  } finally {
    for (const step of hostClock.stop()) {
      faultsPlayed.push({ kind: 'host-clock-step', from: step.from, t: step.t, ms: step.ms, found: true })
      h.note(`the host's wall clock stepped by ${step.ms > 0 ? '+' : ''}${step.ms} ms at ${(step.t - started).toFixed(0)} ms`)
    }
    await h.stopWorkers()
    for (const w of workers) for (const p of w.proxies ?? []) await p.close()
  }
  // Leases of killed holders run out by the store's clock. A topology is read once whole
  // again (a Sentinel set still demoting an old primary may name a server that does not
  // answer yet); one that does not become whole is a note, and the read is tried anyway.
  if (env.healthy) await env.healthy().catch((err) => h.note(`not whole again: ${err.message.slice(0, 200)}`))
  let leftover = null
  const until = Date.now() + params.ttl * 2 + 3000
  for (;;) {
    try {
      leftover = await env.leftover(prefix)
      if (leftover.length === 0 || Date.now() > until) break
    } catch (err) {
      if (Date.now() > until) { h.note(`leftover: ${err.message}`); break }
    }
    await sleep(200)
  }
  const factor = env.boundFactor ?? 1
  const base = ((env.opts.connectTimeout ?? 5000) + (env.opts.responseTimeout ?? 5000)) * factor
  const bound = (f) => {
    if (f === 'request' || f === 'elect') return null // a request waits for its callback
    if (['acquire', 'read', 'write', 'acquireAll'].includes(f)) return params.wait + base
    return base
  }
  const errors = h.events.filter((e) => e.ev === 'error')
  const result = check({ events: h.events, resourceLog: h.resource.log, faults: faultsPlayed, model, params, bound, leftover, runEnd: runEnd ?? now(), sharedPermitTokens: env.sharedPermitTokens === true })
  result.violations.unshift(...h.violations)
  return {
    seed: sched.seed,
    violations: result.violations,
    figures: { ...result.figures, ms: Math.round(now() - started), ...(env.dataRelays ? { dataConns: env.dataRelays.reduce((a, d) => a + [...d.accepted.values()].reduce((x, y) => x + y, 0), 0) } : {}) },
    holds: result.holds,
    events: h.events,
    register: h.resource.log,
    faults: faultsPlayed,
    notes: [...h.notes, ...errors.slice(0, 3).map((e) => `worker error: ${e.msg}`),
      ...h.events.filter((e) => e.ev === 'connect-retry').slice(0, 3).map((e) => `${e.a}: connect refused at start, asked again (${e.code}: ${e.msg})`)],
    harnessErrors: errors.length,
    start: started,
  }
}

module.exports = { runSchedule }
