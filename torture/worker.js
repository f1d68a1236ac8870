'use strict'
// A torture worker: a child process that uses deadbolt only through its public entry point,
// runs the commands the orchestrator sends over IPC, and logs what it saw as JSON lines on
// stdout with CLOCK_MONOTONIC timestamps in ms (process.hrtime.bigint(), comparable across
// processes on Linux). Before every write to the protected resource it reads `lock.held`
// and logs it: that is what the checker measures overlaps on.
//
// Events: acquire {key, token, owner, g (grant id)} · enter · write {key, token, held, wid} · exit · release {ok}
// · lost {reason} (onLost) · abort (signal) · acquire-error {code} · busy / busy-end.

const path = require('node:path')
const { Worker } = require('node:worker_threads')
const deadbolt = require('..')
const { offerWrite, serveCommands } = require('./ipc')

const ID = process.env.TORTURE_WORKER || String(process.pid)
const now = () => Number(process.hrtime.bigint()) / 1e6
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const log = (ev) => process.stdout.write(JSON.stringify({ w: ID, t: now(), ...ev }) + '\n')

const clients = new Map()
const holds = new Map()
const threads = new Map()

// ── the protected resource, reached over IPC ──
let grantSeq = 0 // one id per grant in this worker: tokens alone repeat after a store loses its counters
// `t0`: taken right before `held` was read, while the event's `t` is taken after: on a loaded
// machine a process can be descheduled between the two, so the read happened somewhere in
// [t0, t] and the checker only counts overlaps that hold whenever in those spans it was.
function write(key, token, held, g, t0) {
  return offerWrite(log, { key, token, held }, { g, t0 })
}

function client(name = 'c') {
  const c = clients.get(name)
  if (!c) throw new Error(`no client ${name}`)
  return c
}

function watch(lock, key, extra = {}) {
  // The signal is read up front so an abort is heard even without onLost.
  lock.signal.addEventListener('abort', () => {
    log({ ev: 'abort', key, token: String(lock.fencingToken), reason: lock.signal.reason?.reason, cause: lock.signal.reason?.cause?.code, held: lock.held, ...extra })
  }, { once: true })
}

function onLostFor(key, extra = {}) {
  return (err) => log({ ev: 'lost', key, token: String(err.fencingToken), reason: err.reason, cause: err.cause?.code, ...extra })
}

function busy(ms) {
  const end = Date.now() + ms
  while (Date.now() < end) { /* the JS thread is stuck */ }
}

/** Writes every `every` ms while held (or, with `stale`, also after the loss) until stopped. */
async function writeLoop(h, tokenOf, heldOf, o) {
  let n = 0
  const endAt = Date.now() + (o.maxLoopMs ?? 60000)
  while (!h.stopped && Date.now() < endAt) {
    const t0 = now()
    const held = heldOf()
    const token = tokenOf()
    if (token === null) break
    await write(h.key, token, held, h.g, t0)
    n++
    if (!held && !o.stale) break
    if (o.busy && n === o.busy.afterWrites) {
      log({ ev: 'busy', key: h.key, ms: o.busy.ms })
      busy(o.busy.ms)
      log({ ev: 'busy-end', key: h.key })
      continue // the first look after the stall, before the event loop turns
    }
    await sleep(o.writeEvery ?? 25)
  }
}

// Set by `stopContending`: every `contend` loop ends after its current round.
let contendStopped = false

const commands = {
  /** Ends every `contend` loop of this worker after its current round. */
  async stopContending() {
    contendStopped = true
    return true
  },

  async connect({ client: name = 'c', url, opts }) {
    const t0 = now()
    clients.set(name, await deadbolt.connect(url, opts))
    return { ms: now() - t0 }
  },

  /** Rounds of acquire → writes → release on random keys. */
  async contend({ client: name, keys, rounds, ttl = 2000, wait = 10000, holdMs = 10, writes = 2, autoExtend = false, retryDelay, deadlineMs = 60000 }) {
    const c = client(name)
    const end = Date.now() + deadlineMs
    let grants = 0
    let errors = 0
    for (let i = 0; i < rounds && Date.now() < end && !contendStopped; i++) {
      const key = keys[Math.floor(Math.random() * keys.length)]
      let lock
      try {
        lock = await c.acquire(key, { ttl, wait, autoExtend, retryDelay, onLost: onLostFor(key) })
      } catch (err) {
        errors++
        log({ ev: 'acquire-error', key, code: err.code, msg: String(err.message).slice(0, 120) })
        if (err.code === 'ERR_LOCK_BACKEND') await sleep(20)
        continue
      }
      grants++
      const g = ++grantSeq
      log({ ev: 'acquire', key, token: String(lock.fencingToken), owner: lock.owner, g, held: lock.held })
      log({ ev: 'enter', key, token: String(lock.fencingToken), g })
      for (let j = 0; j < writes; j++) {
        const t0 = now()
        await write(key, lock.fencingToken, lock.held, g, t0)
        if (holdMs > 0) await sleep(holdMs / writes)
      }
      log({ ev: 'exit', key, token: String(lock.fencingToken) })
      try {
        const ok = await lock.release()
        log({ ev: 'release', key, token: String(lock.fencingToken), ok })
      } catch (err) {
        errors++
        log({ ev: 'release-error', key, token: String(lock.fencingToken), code: err.code })
      }
    }
    return { grants, errors }
  },

  /** Acquires `key` (acquire or withLock) and writes in the background; replies at the grant. */
  async hold({ client: name, key, as = key, api = 'acquire', ttl = 1000, wait = 10000, autoExtend, extendEvery, maxHold, retryDelay, writeEvery = 25, stale = false, busy: busyOpt, maxLoopMs }) {
    const c = client(name)
    const h = { key, stopped: false, lock: null, loop: null, done: null }
    holds.set(as, h)
    const opts = { ttl, wait, autoExtend, extendEvery, maxHold, retryDelay, onLost: onLostFor(key, { as }) }
    for (const k of Object.keys(opts)) if (opts[k] === undefined) delete opts[k]
    const loopOpts = { writeEvery, stale, busy: busyOpt, maxLoopMs }
    const granted = (lock) => {
      h.lock = lock
      h.g = ++grantSeq
      watch(lock, key, { as })
      log({ ev: 'acquire', key, token: String(lock.fencingToken), owner: lock.owner, as, g: h.g, held: lock.held, aborted: lock.signal.aborted })
      return { token: String(lock.fencingToken), held: lock.held, aborted: lock.signal.aborted, owner: lock.owner }
    }
    if (api === 'withLock') {
      return new Promise((resolve, reject) => {
        h.done = c.withLock(key, opts, async (lock) => {
          resolve(granted(lock))
          await writeLoop(h, () => lock.fencingToken, () => lock.held, loopOpts)
          while (!h.stopped) await sleep(10)
          log({ ev: 'exit', key, token: String(lock.fencingToken), as })
          return 'done'
        }).then((v) => { log({ ev: 'withlock-done', key, as, ok: true }); return { ok: true, v } },
          (err) => { log({ ev: 'withlock-done', key, as, ok: false, code: err.code, reason: err.reason }); reject(err); return { ok: false, code: err.code } })
      })
    }
    const lock = await c.acquire(key, opts)
    const r = granted(lock)
    h.loop = writeLoop(h, () => lock.fencingToken, () => lock.held, loopOpts)
    return r
  },

  /** Campaigns for `name`; writes with the term while leader. Replies at once. */
  async elect({ client: name, key, as = key, ttl = 1000, retryDelay, writeEvery = 25, stale = false }) {
    const c = client(name)
    const h = { key, stopped: false, election: null, terms: [] }
    holds.set(as, h)
    let lastLock = null
    h.election = c.elect(key, {
      ttl,
      retryDelay,
      onElected: (lock) => {
        lastLock = lock
        h.lock = lock
        h.g = ++grantSeq
        log({ ev: 'acquire', key, token: String(lock.fencingToken), owner: lock.owner, as, g: h.g, leader: true, held: lock.held, isLeader: h.election?.isLeader })
        watch(lock, key, { as })
        writeLoop(h, () => (stale ? lock.fencingToken : h.election.term ?? lock.fencingToken), () => h.election.isLeader && lock === lastLock, { writeEvery, stale: false })
      },
      onRevoked: (err) => log({ ev: 'lost', key, token: String(err.fencingToken), reason: err.reason, as, revoked: true }),
    })
    return { ok: true }
  },

  probe({ as }) {
    const h = holds.get(as)
    if (!h) return null
    if (h.election) return { held: h.election.isLeader, term: h.election.term === null ? null : String(h.election.term), aborted: h.lock ? h.lock.signal.aborted : null }
    if (!h.lock) return { held: false, granted: false }
    return { held: h.lock.held, aborted: h.lock.signal.aborted, reason: h.lock.signal.reason?.reason ?? null, token: String(h.lock.fencingToken) }
  },

  async release({ as }) {
    const h = holds.get(as)
    h.stopped = true
    if (h.election) { await h.election.resign(); return true }
    if (h.done) { const r = await h.done; return r }
    await h.loop
    const ok = await h.lock.release()
    log({ ev: 'release', key: h.key, token: String(h.lock.fencingToken), ok, as })
    return ok
  },

  /** One call, timed; `guardMs` bounds how long the worker waits for it to settle. */
  async call({ client: name, op, key, as, opts, url, guardMs = 30000 }) {
    const t0 = now()
    let p
    if (op === 'connect') p = deadbolt.connect(url, opts).then(async (c) => { c.close().catch(() => {}); return 'connected' })
    else if (op === 'acquire' || op === 'tryAcquire') {
      p = client(name)[op](key, opts).then(async (lock) => {
        if (!lock) return null
        const g = ++grantSeq
        log({ ev: 'acquire', key, token: String(lock.fencingToken), owner: lock.owner, g, held: lock.held })
        const tok = String(lock.fencingToken)
        const tw = now()
        await write(key, lock.fencingToken, lock.held, g, tw)
        const ok = await lock.release()
        log({ ev: 'release', key, token: tok, ok })
        return { token: tok, released: ok }
      })
    } else if (op === 'inspect') p = client(name).inspect(key).then((i) => (i ? { owner: i.owner, token: String(i.fencingToken) } : null))
    else if (op === 'ping') p = client(name).ping().then(() => 'pong')
    else if (op === 'close') { const c = client(name); clients.delete(name); p = c.close().then(() => 'closed') }
    else if (op === 'extend') p = holds.get(as).lock.extend().then(() => 'extended')
    else if (op === 'release') { holds.get(as).stopped = true; p = holds.get(as).lock.release() }
    else throw new Error(`unknown op ${op}`)
    let timer
    const guard = new Promise((resolve) => { timer = setTimeout(() => resolve({ hung: true }), guardMs) })
    const r = await Promise.race([p.then((value) => ({ ok: true, value }), (err) => ({ ok: false, code: err.code ?? null, name: err.name, msg: String(err.message).slice(0, 160) })), guard])
    clearTimeout(timer)
    return { op, ms: now() - t0, ...r }
  },

  /**
   * `n` acquisitions, every one aborted: half queue on held keys and are aborted 1–50 ms
   * later, a quarter are aborted synchronously right after the call on a held key, a quarter
   * likewise on a free key. Reports the outcomes per kind.
   */
  async storm({ client: name, busyKeys, freeKeys, n, wait = 5000 }) {
    const c = client(name)
    const results = []
    for (let i = 0; i < n; i++) {
      const ac = new AbortController()
      const kind = i % 4 < 2 ? 'queued' : i % 4 === 2 ? 'sync-busy' : 'sync-free'
      const keys = kind === 'sync-free' ? freeKeys : busyKeys
      const key = keys[Math.floor(i / 4) % keys.length]
      const reason = new Error(`storm ${i}`)
      const p = c.acquire(key, { signal: ac.signal, ttl: 5000, wait, retryDelay: 20 })
      results.push(p.then((lock) => ({ lock, key, kind }), (err) => ({ err, reason, kind })))
      if (kind === 'queued') setTimeout(() => ac.abort(reason), 1 + (i % 50))
      else ac.abort(reason)
    }
    const settled = await Promise.all(results)
    const out = { granted: 0, rejectedWithReason: 0, otherErrors: 0, byKind: {} }
    for (const s of settled) {
      const k = (out.byKind[s.kind] ??= {})
      let outcome
      if (s.lock) {
        out.granted++
        outcome = 'granted'
        log({ ev: 'acquire', key: s.key, token: String(s.lock.fencingToken), owner: s.lock.owner, despiteAbort: true })
        const ok = await s.lock.release()
        log({ ev: 'release', key: s.key, token: String(s.lock.fencingToken), ok })
      } else if (s.err === s.reason) { out.rejectedWithReason++; outcome = 'reason' } else { out.otherErrors++; outcome = s.err?.code ?? String(s.err) }
      k[outcome] = (k[outcome] ?? 0) + 1
    }
    return out
  },

  stats({ client: name }) { return client(name).stats() },

  /** Closes one client, or every client when no name is given. */
  async close({ client: name } = {}) {
    for (const h of holds.values()) h.stopped = true
    const names = name === undefined ? [...clients.keys()] : [name]
    for (const n of names) {
      const c = clients.get(n)
      clients.delete(n)
      if (c) await c.close()
    }
    return true
  },

  /** A worker thread that holds or waits for `key` through its own client. */
  async thread({ name, url, key, mode, ttl, opts }) {
    const w = new Worker(path.join(__dirname, 'thread.js'), { workerData: { url, key, mode, ttl, opts, id: `${ID}/${name}` }, stdout: false })
    threads.set(name, w)
    w.on('error', (err) => log({ ev: 'thread-error', name, msg: String(err.message) }))
    return new Promise((resolve, reject) => {
      w.on('message', (m) => { if (m.ready) resolve(m) })
      w.once('exit', (code) => reject(new Error(`thread ${name} exited (${code}) before it was ready`)))
    })
  },

  async terminate({ name }) {
    const t = now()
    await threads.get(name).terminate()
    log({ ev: 'thread-terminated', name })
    return { t }
  },

  exit() { setImmediate(() => process.exit(0)); return true },
}

serveCommands(commands)
log({ ev: 'ready', pid: process.pid })
