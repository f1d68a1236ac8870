'use strict'
// A harness worker: a child process (forked through torture/harness.js's WorkerHandle) that
// runs one or more actors of a workload, each with a client of its own, and logs every step
// as a JSON line on stdout, timed with process.hrtime.bigint() (CLOCK_MONOTONIC: one clock
// for every process of the machine). Writes to the protected register go to the orchestrator
// over IPC. Commands: start, stall (block the event loop), stop (actors finish their round,
// release, close), exit.
//
// History lines: invoke / ok / fail {f, key, id} for every call (a call with an invoke and
// nothing else is unknown); grant {g, key, token, owner, held, settledHeld, vu} (`held` read
// when the grant is logged, `settledHeld` read first thing once the call settled, before any
// line is written); sample {g, held, vu} (a read of `held` and of the local deadline
// `validUntil`, converted to the monotonic clock); write {g, key, token, held} (an offer to
// the register); lost {g, reason} (onLost, an aborted signal, a revoked term); end {g, why}
// (the actor stops believing it holds g: before a release, at a `held === false` read, at a
// hand-over).

const deadbolt = require('..')
const { prng } = require('./prng')
const { unsafeClient } = require('./unsafe')
const { redlockFaceClient } = require('./redlock-face')
const { redisSemaphoreClient } = require('./redis-semaphore')
const WORKLOADS = require('./workloads')
const { offerWrite, serveCommands } = require('../torture/ipc')
const { monoDeadline } = require('./deadline')

const W = process.env.TORTURE_WORKER || String(process.pid)
const now = () => Number(process.hrtime.bigint()) / 1e6
// The wall clock as it was at start: the jobs workload skews Date.now() per process.
const realNow = Date.now
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const log = (e) => process.stdout.write(JSON.stringify({ w: W, t: now(), ...e }) + '\n')

let stopped = false
const running = []
const clients = []

/**
 * `held` of what a call resolved with (a MultiLock's: of each of its locks), read before
 * anything else is done with it: a grant is judged on it ("arrived already lost"), not on a
 * read after the `ok` line, whose write to the orchestrator's pipe may block while that
 * process lags (at load 30, for longer than what was left of a grant's lease).
 */
const settledHeld = new WeakMap()
function noteSettled(r) {
  if (r === null || typeof r !== 'object') return
  if (Array.isArray(r.locks)) for (const l of r.locks) if (l && typeof l === 'object') settledHeld.set(l, l.held)
  if ('held' in r) settledHeld.set(r, r.held)
}

function offer(a, key, token, held, g, t0) {
  return offerWrite(log, { key, token, held }, { g, t0 }, { a })
}


function context(a, client, seed, cfg) {
  let ops = 0
  let grants = 0
  const ctx = {
    a,
    client,
    cfg,
    rnd: prng(seed),
    now,
    realNow: () => realNow(),
    sleep,
    /** Logs an event of the workload's own (`ev` and its fields) with this actor's id. */
    log: (e) => log({ a, ...e }),
    stopped: () => stopped,
    key: (name) => `${cfg.prefix}${name}`,
    connect: () => connect(cfg),
    /** Runs `fn` as one call of the history: invoke, then ok (with `summary(result)`) or fail. */
    async call(f, key, fn, summary = () => ({})) {
      const id = `${a}:${++ops}`
      log({ a, ev: 'invoke', f, key, id })
      try {
        const r = await fn()
        noteSettled(r)
        log({ a, ev: 'ok', f, key, id, ...summary(r) })
        return r
      } catch (err) {
        log({ a, ev: 'fail', f, key, id, code: err.code ?? err.name ?? null, msg: String(err.message).slice(0, 100) })
        return undefined
      }
    },
    /** A new grant id, logged with what the grant is. */
    granted(key, lock, extra = {}) {
      const g = `${a}#${++grants}`
      log({ a, ev: 'grant', g, key, token: lock.fencingToken === null ? null : String(lock.fencingToken), owner: lock.owner, held: lock.held, settledHeld: settledHeld.get(lock), vu: monoDeadline(() => lock.validUntil), ...extra })
      return g
    },
    lost: (g, key) => (err) => log({ a, ev: 'lost', g, key, reason: err?.reason ?? err?.name ?? null }),
    end: (g, key, why) => log({ a, ev: 'end', g, key, why }),
    /** One read of `held` and `validUntil`; false once not held. */
    sample(g, key, view) {
      const t0 = now()
      const held = view.held
      const vu = monoDeadline(() => view.validUntil)
      log({ a, ev: 'sample', g, key, held, vu, t0 })
      return held
    },
    /** Reads `held`, then offers a write with `token` to the register; resolves accepted. */
    write(g, key, token, view) {
      const t0 = now()
      const held = view.held
      return offer(a, key, token, held, g, t0)
    },
    /**
     * Holds grant `g` for `ms`: samples `held` every ~25 ms and, with `token`, writes to the
     * register; ends at a `held === false` read (logged), at `ms`, or when stopped.
     */
    async hold(g, key, view, ms, { token = null, regKey = key } = {}) {
      const until = now() + ms
      while (now() < until) {
        if (!ctx.sample(g, key, view)) { ctx.end(g, key, 'held-false'); return false }
        if (token !== null) await ctx.write(g, regKey, token, view)
        await sleep(15 + ctx.rnd.int(0, 20))
      }
      return true
    },
  }
  return ctx
}

function connect(cfg) {
  if (cfg.lock === 'unsafe') return unsafeClient(cfg.url)
  if (cfg.lock === 'redlock') return redlockFaceClient(cfg.url)
  if (cfg.lock === 'redis-semaphore') return redisSemaphoreClient(cfg.url)
  return deadbolt.connect(cfg.url, cfg.opts)
}

/**
 * A client, asked again for up to 20 s: a worker started while a fault of the previous
 * schedule still shows (a server recovering, a respawn during a blackhole) has no actor
 * without one. Each refused try is logged (`connect-retry`, with its code), not thrown.
 */
async function connectSoon(cfg, id) {
  const until = Date.now() + 20_000
  for (;;) {
    try {
      return await connect(cfg)
    } catch (err) {
      if (Date.now() > until) throw err
      log({ a: id, ev: 'connect-retry', code: err.code ?? null, msg: String(err.message).slice(0, 200) })
      await sleep(250)
    }
  }
}

const commands = {
  async start(cfg) {
    const wl = WORKLOADS[cfg.workload]
    for (const { id, seed } of cfg.actors) {
      const client = await connectSoon(cfg, id)
      clients.push(client)
      const ctx = context(id, client, seed, cfg)
      running.push((async () => {
        while (!stopped) {
          try { await wl.round(ctx) } catch (err) { log({ a: id, ev: 'error', msg: String(err.stack).slice(0, 300) }); await sleep(20) }
        }
      })())
    }
    return true
  },
  stall({ ms }) {
    setImmediate(() => {
      log({ ev: 'stall', ms })
      const end = Date.now() + ms
      while (Date.now() < end) { /* the event loop is stuck */ }
      log({ ev: 'stall-end' })
    })
    return true
  },
  async stop() {
    stopped = true
    await Promise.all(running)
    for (const c of clients) await c.close().catch(() => {})
    return true
  },
  exit() { setImmediate(() => process.exit(0)); return true },
}

serveCommands(commands)
process.on('unhandledRejection', (err) => log({ ev: 'error', msg: `unhandled: ${String(err?.stack ?? err).slice(0, 300)}` }))
log({ ev: 'ready', pid: process.pid })
