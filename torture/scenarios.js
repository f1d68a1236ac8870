'use strict'
// The scenarios: one entry each, run against every store of the table (stores.js). A scenario
// drives workers and faults through the harness and adds its own promise checks; the common
// invariants (no overlap, no stale write accepted, no token violation, no leftover state) are
// checked for every scenario by checker.js.
//
// Timing appears in a pass/fail check only where it is the promise itself: takeover within
// ttl + slack, a loss heard no later than the takeover, a call returning within its timeouts.
// Everything else waits on observable state (events, the store, the resource), bounded.

const { sleep } = require('./harness')
const { FAILOVER_SCENARIOS } = require('./failover')
/** Where version 0.1 kept a key's side keys (`{key}:fence`): names a user may lock. */
function legacySideKey(key, suffix) {
  const open = key.indexOf('{')
  const tagged = open >= 0 && key.indexOf('}', open + 1) > open + 1
  return tagged ? `${key}:${suffix}` : `{${key}}:${suffix}`
}

const SLACK = 1500 // generous: a noisy 2-core box
// A loss is due at the lease's local deadline; this much is allowed for delivering it to
// the JS thread on a busy box.
const LOSS_SLACK = 500
const pick = (short, s, f) => (short ? s : f)

/** Resolves when `fn()` is truthy, polling every `every` ms; resolves false after `ms`. */
async function until(fn, ms, every = 25) {
  const end = Date.now() + ms
  for (let i = 0; i < 100000; i++) {
    if (await fn()) return true
    if (Date.now() > end) return false
    await sleep(every)
  }
  return false
}

const grantOf = (h, pred, ms, what) => h.waitFor((e) => e.ev === 'acquire' && pred(e), ms, what)
const lostOf = (h, pred, ms) => h.maybe((e) => (e.ev === 'lost' || e.ev === 'abort') && pred(e), ms)

async function connected(h, id, url, opts) {
  const w = await h.worker(id)
  await w.cmd('connect', { url, opts: { ...h.baseOpts, ...opts } })
  return w
}

/** Waits until worker `w` has at least one acquisition queued in its process. */
async function queued(w, ms = 5000) {
  return until(async () => (await w.cmd('stats', {}).catch(() => ({ waiting: 0 }))).waiting > 0, ms)
}

// ───────────────────────────────────────── scenarios ─────────────────────────────────────────

const baseline = {
  name: '1-baseline',
  title: 'workers contending on a few keys never overlap and get strictly increasing tokens',
  server: 'shared',
  async run({ h, url, short }) {
    const n = pick(short, 3, 8)
    const rounds = pick(short, 40, 300)
    const keys = [h.key('a'), h.key('b'), h.key('c')]
    const workers = await Promise.all(Array.from({ length: n }, (_, i) => connected(h, `w${i}`, url)))
    const out = await Promise.all(workers.map((w, i) => w.cmd('contend', { keys, rounds, ttl: 3000, wait: 30000, holdMs: 4, writes: 2, autoExtend: i % 2 === 1, retryDelay: 20 }, { timeout: 120000 })))
    const errors = out.reduce((a, o) => a + o.errors, 0)
    h.check(errors === 0, `${errors} acquisition/release error(s) under plain contention`)
    const notReleased = h.events.filter((e) => e.ev === 'release' && e.ok !== true).length
    h.check(notReleased === 0, `${notReleased} release(s) returned false for locks held well within their ttl`)
    h.check(h.events.filter((e) => e.ev === 'lost').length === 0, 'a lock was reported lost under plain contention')
  },
}

const holderKill = {
  name: '2-holder-kill9',
  title: 'a holder killed with SIGKILL is taken over within ttl plus slack',
  server: 'throwaway',
  async run({ h, url, short }) {
    const ttl = 1000
    h.maxTtl = ttl
    const key = h.key('k')
    const rounds = pick(short, 2, 6)
    const takeover = (h.figures.takeover = [])
    let holder = await connected(h, 'h0', url)
    await holder.cmd('hold', { key, ttl, autoExtend: true, extendEvery: 250 })
    let spawned = 1
    const waiters = []
    for (let r = 0; r < rounds; r++) {
      while (waiters.length < 2) {
        const w = await connected(h, `h${spawned++}`, url)
        w.cmd('hold', { key, ttl, autoExtend: true, extendEvery: 250, wait: 20000, retryDelay: 50 }).catch(() => {})
        await queued(w)
        waiters.push(w)
      }
      const f = h.fault('kill -9 holder', { w: holder.id })
      await holder.kill()
      const g = await grantOf(h, (e) => e.key === key && e.t > f.t, ttl + 10000, 'a takeover')
      takeover.push(g.t - f.t)
      h.check(g.t - f.t <= ttl + SLACK, `takeover took ${(g.t - f.t).toFixed(0)} ms (ttl ${ttl} + slack ${SLACK})`)
      holder = waiters.splice(waiters.findIndex((w) => w.id === g.w), 1)[0]
    }
    await holder.cmd('release', { as: key })
  },
}

const holderStop = {
  name: '3-holder-sigstop',
  title: 'a holder paused past its ttl is fenced off and sees its lock lost once resumed',
  server: 'throwaway',
  async run({ h, url }) {
    const ttl = 1000
    h.maxTtl = ttl
    const auto = h.key('auto')
    const plain = h.key('plain')
    const holder = await connected(h, 'holder', url)
    const waiter = await connected(h, 'waiter', url)
    // The holder keeps writing after the loss (stale: true), like code that never looks at
    // `held`: the resource must refuse those writes once the new holder has written.
    await holder.cmd('hold', { key: auto, ttl, autoExtend: true, extendEvery: 250, stale: true, writeEvery: 20 })
    await holder.cmd('hold', { key: plain, ttl, autoExtend: false, stale: true, writeEvery: 20 })
    for (const key of [auto, plain]) waiter.cmd('hold', { key, ttl: 3000, autoExtend: true, wait: 20000, retryDelay: 50 }).catch(() => {})
    await queued(waiter)
    await holder.pause()
    const f = h.fault('SIGSTOP holder', { w: holder.id })
    // Resume only once the new holder's token reached the resource: from then on every write
    // of the paused holder is stale and must be refused.
    for (const key of [auto, plain]) {
      const g = await grantOf(h, (e) => e.key === key && e.w === waiter.id, 15000, `the waiter's grant of ${key}`)
      ;(h.figures.takeover ??= []).push(g.t - f.t)
      await until(() => h.resource.log.some((r) => r.key === key && r.w === waiter.id && r.accepted), 10000, 10)
    }
    const pausedFor = h.now() - f.t
    const c = h.fault('SIGCONT holder', { w: holder.id })
    holder.signal('SIGCONT')
    h.note(`holder paused ${pausedFor.toFixed(0)} ms`)
    for (const key of [auto, plain]) {
      const lost = await lostOf(h, (e) => e.key === key && e.w === holder.id, 10000)
      h.check(lost !== null, `${key.slice(h.prefix.length)}: the resumed holder never heard that its lock was lost`)
      const p = await holder.cmd('probe', { as: key })
      h.check(p.held === false, `${key.slice(h.prefix.length)}: the resumed holder still reads held === true`)
      h.check(p.aborted === true, `${key.slice(h.prefix.length)}: the resumed holder's signal is not aborted`)
      // Wait until the paused holder has tried at least one write after resuming.
      await until(() => h.resource.log.some((r) => r.key === key && r.w === holder.id && r.t > c.t), 5000, 10)
      const late = h.resource.log.filter((r) => r.key === key && r.w === holder.id && r.t > c.t)
      h.check(late.length > 0, `${key.slice(h.prefix.length)}: the resumed holder made no write to test fencing with`)
      const acceptedLate = late.filter((r) => r.accepted).length
      h.check(acceptedLate === 0, `${key.slice(h.prefix.length)}: ${acceptedLate} write(s) of the resumed stale holder were accepted`)
      const heldLate = h.events.filter((e) => e.ev === 'write' && e.key === key && e.w === holder.id && e.t > c.t && e.held).length
      if (heldLate) h.note(`${key.slice(h.prefix.length)}: the resumed holder read held === true ${heldLate} time(s) after SIGCONT, while the new holder held it`)
    }
    await holder.cmd('release', { as: auto })
    await holder.cmd('release', { as: plain })
    for (const key of [auto, plain]) await waiter.cmd('release', { as: key })
  },
}

const jsBlocked = {
  name: '4-js-blocked',
  title: 'a blocked event loop keeps an auto-extended lock, and maxHold gives it up without overlap',
  server: 'throwaway',
  async run({ h, url }) {
    const ttl = 1000
    const maxHold = 1500
    const stallMs = 3500
    h.maxTtl = ttl
    const kept = h.key('kept')
    const bounded = h.key('maxhold')
    const holder = await connected(h, 'holder', url)
    const waiter = await connected(h, 'waiter', url)
    await holder.cmd('hold', { key: bounded, ttl, autoExtend: true, extendEvery: 250, maxHold, writeEvery: 20 })
    await holder.cmd('hold', { key: kept, ttl, autoExtend: true, extendEvery: 250, writeEvery: 20, busy: { afterWrites: 3, ms: stallMs } })
    for (const key of [kept, bounded]) waiter.cmd('hold', { key, ttl: 3000, autoExtend: true, wait: 20000, retryDelay: 50 }).catch(() => {})
    const busy = await h.waitFor((e) => e.ev === 'busy' && e.w === holder.id, 5000, 'the stall')
    h.fault('JS thread blocked', { ms: stallMs })
    const end = await h.waitFor((e) => e.ev === 'busy-end' && e.w === holder.id, stallMs + 10000, 'the end of the stall')
    // maxHold: the lock was given up during the stall and passed on; the stalled holder's
    // first look after the stall must say it is gone.
    const g = await h.maybe((e) => e.ev === 'acquire' && e.key === bounded && e.w === waiter.id, 5000)
    h.check(g !== null && g.t < end.t, `maxHold: the lock was not passed on while the holder was stalled (${maxHold} ms maxHold, ${stallMs} ms stall)`)
    const acq = h.events.find((e) => e.ev === 'acquire' && e.key === bounded && e.w === holder.id)
    if (g) (h.figures.takeover ??= []).push(g.t - (acq.t + maxHold))
    // Its log may reach us after the stall's end does: wait for it.
    const firstAfter = await h.maybe((e) => e.ev === 'write' && e.key === bounded && e.w === holder.id && e.t >= end.t, 5000)
    h.check(firstAfter && firstAfter.held === false, 'maxHold: the stalled holder read held === true right after the stall, with the lock given up')
    const lost = await lostOf(h, (e) => e.key === bounded && e.w === holder.id && e.ev === 'lost', 5000)
    h.check(lost?.reason === 'max-hold', `maxHold: the loss reason is ${lost?.reason}, not max-hold`)
    if (lost) (h.figures.lateness ??= []).push(lost.t - (acq.t + maxHold))
    // No maxHold: the native heartbeat kept the lease; nobody else got it during the stall.
    const stolen = h.events.find((e) => e.ev === 'acquire' && e.key === kept && e.w === waiter.id && e.t < end.t)
    h.check(!stolen, 'autoExtend: the lock passed on while its holder was only stalled (the heartbeat should have kept it)')
    const keptAfter = await h.maybe((e) => e.ev === 'write' && e.key === kept && e.w === holder.id && e.t >= end.t, 5000)
    h.check(keptAfter?.held === true, 'autoExtend: the stalled holder lost its lock although the heartbeat runs natively')
    h.note(`stall ${(end.t - busy.t).toFixed(0)} ms`)
    await holder.cmd('release', { as: kept })
    await grantOf(h, (e) => e.key === kept && e.w === waiter.id, 10000, 'the waiter getting the released lock')
    await holder.cmd('release', { as: bounded })
    for (const key of [kept, bounded]) await waiter.cmd('release', { as: key })
  },
}

const lateGrant = {
  name: '5-late-grant',
  title: 'a lock granted after waiting longer than its ttl is held, releasable and not revoked',
  server: 'shared',
  async run({ h, url, raw }) {
    const ttl = 1000
    const holdFor = 3000
    h.maxTtl = ttl
    const keys = { plain: h.key('plain'), auto: h.key('auto'), withLock: h.key('withlock') }
    const name = h.key('election')
    const holder = await connected(h, 'holder', url)
    const waiter = await connected(h, 'waiter', url)
    for (const key of Object.values(keys)) await holder.cmd('hold', { key, ttl, autoExtend: true, extendEvery: 250 })
    await holder.cmd('elect', { key: name, ttl })
    await grantOf(h, (e) => e.key === name && e.w === holder.id, 5000, 'the first leader')
    const t0 = h.now()
    const grants = {
      plain: waiter.cmd('hold', { key: keys.plain, ttl, wait: 10000, autoExtend: false }),
      auto: waiter.cmd('hold', { key: keys.auto, ttl, wait: 10000, autoExtend: true, extendEvery: 250 }),
      withLock: waiter.cmd('hold', { key: keys.withLock, api: 'withLock', ttl, wait: 10000 }),
    }
    grants.plain.catch(() => {}); grants.auto.catch(() => {}); grants.withLock.catch(() => {})
    await waiter.cmd('elect', { key: name, ttl })
    await queued(waiter)
    await sleep(Math.max(0, holdFor - (h.now() - t0))) // the holder keeps the keys 3 s: the premise
    for (const key of Object.values(keys)) await holder.cmd('release', { as: key })
    await holder.cmd('release', { as: name }) // resign
    const short_ = (k) => k.slice(h.prefix.length)
    for (const [kind, p] of Object.entries(grants)) {
      let r
      try { r = await p } catch (err) { h.violate(`${kind}: the late acquisition failed: ${err.code} ${err.message}`); continue }
      h.check(r.held === true, `${kind}: granted after ${((h.now() - t0) / 1000).toFixed(1)} s of waiting with held === false`)
      h.check(r.aborted === false, `${kind}: granted with its signal already aborted`)
    }
    // The plain lease is released at once; the auto-extended one after more than a ttl.
    try {
      const ok = await waiter.cmd('release', { as: keys.plain })
      h.check(ok === true, 'plain: release() of the late grant returned false')
    } catch (err) { h.violate(`plain: ${err.message}`) }
    await sleep(ttl * 1.5)
    const p = await waiter.cmd('probe', { as: keys.auto })
    h.check(p?.held === true, 'auto: the auto-extended late grant was not held 1.5 ttl later')
    try {
      const ok = await waiter.cmd('release', { as: keys.auto })
      h.check(ok === true, 'auto: release() of the late grant returned false')
    } catch (err) { h.violate(`auto: ${err.message}`) }
    try {
      const r = await waiter.cmd('release', { as: keys.withLock })
      h.check(r?.ok === true, `withLock: the routine's lock was lost (${r?.code})`)
    } catch (err) { h.violate(`withLock: ${err.message}`) }
    for (const [kind, key] of Object.entries(keys)) {
      const lease = await raw.lease(key)
      h.check(lease === null, `${kind}: the key is still held in the store after release (${short_(key)})`)
    }
    // Election: the late winner stays leader (no revocation) for two ttls.
    const won = await h.maybe((e) => e.ev === 'acquire' && e.key === name && e.w === waiter.id, 5000)
    h.check(won !== null, 'election: the waiting candidate was not elected after the leader resigned')
    if (won) {
      await sleep(2 * ttl)
      const revoked = h.events.find((e) => e.ev === 'lost' && e.key === name && e.w === waiter.id)
      h.check(!revoked, `election: the late winner was revoked ${revoked ? (revoked.t - won.t).toFixed(0) : ''} ms after being elected (${revoked?.reason})`)
      const pr = await waiter.cmd('probe', { as: name })
      h.check(pr.held === true, 'election: the late winner is not leader two ttls later')
      await waiter.cmd('release', { as: name })
    }
  },
}

const frozen = {
  name: '6-frozen-connection',
  title: 'a holder whose connection froze hears of the loss no later than the next grant',
  server: 'throwaway',
  async run({ h, url, short, server }) {
    const { freezableProxy } = require('./proxy')
    const ttl = 1500
    h.maxTtl = ttl
    const rounds = pick(short, 2, 5)
    const waiter = await connected(h, 'waiter', url)
    h.figures.takeover = []
    h.figures.lateness = []
    for (let r = 0; r < rounds; r++) {
      const key = h.key(`k${r}`)
      const proxy = await freezableProxy(server.port)
      h.onDispose(() => proxy.close())
      // The holder reaches the store only through the proxy; the waiter directly.
      const holder = await h.worker(`holder${r}`)
      await holder.cmd('connect', { url: url.replace(`:${server.port}`, `:${proxy.port}`), opts: { connectTimeout: 1000, responseTimeout: 1000 } })
      await holder.cmd('hold', { key, ttl, autoExtend: true, extendEvery: 300, writeEvery: 20 })
      waiter.cmd('hold', { key, ttl, wait: 20000, autoExtend: true, retryDelay: 50 }).catch(() => {})
      await queued(waiter)
      const f = h.fault('freeze holder connection', { w: holder.id })
      proxy.freeze()
      const g = await grantOf(h, (e) => e.key === key && e.w === waiter.id, ttl + 15000, 'the takeover')
      h.figures.takeover.push(g.t - f.t)
      const lost = await lostOf(h, (e) => e.key === key && e.w === holder.id, 3000)
      if (lost) h.figures.lateness.push(lost.t - (f.t + ttl))
      h.check(lost !== null, `round ${r}: the frozen holder never heard of the loss (the other worker got the lock ${(g.t - f.t).toFixed(0)} ms after the freeze)`)
      if (lost) h.check(lost.t <= g.t, `round ${r}: the frozen holder heard of the loss ${(lost.t - g.t).toFixed(0)} ms after the other worker got the lock`)
      const p = await holder.cmd('probe', { as: key })
      h.check(p.held === false, `round ${r}: the frozen holder still reads held === true after the takeover`)
      h.check(p.aborted === true, `round ${r}: the frozen holder's signal is not aborted after the takeover`)
      await waiter.cmd('release', { as: key })
      proxy.thaw()
      await proxy.close()
      await holder.cmd('close', {}, { timeout: 15000 }).catch((err) => h.violate(`round ${r}: closing the frozen holder: ${err.message}`))
    }
  },
}

const connKill = {
  name: '7-connection-killed',
  title: 'locks keep working after the store kills deadbolt connections',
  server: 'throwaway',
  async run({ h, url, short, raw }) {
    const ttl = 1500
    h.maxTtl = ttl
    const keys = [h.key('a'), h.key('b')]
    const hk = h.key('held')
    const workers = await Promise.all([0, 1, 2].map((i) => connected(h, `w${i}`, url)))
    const holder = await connected(h, 'holder', url)
    const held = await holder.cmd('hold', { key: hk, ttl, autoExtend: true, extendEvery: 300, writeEvery: 50 })
    const running = workers.map((w, i) => w.cmd('contend', { keys, rounds: 100000, ttl, wait: 10000, holdMs: 4, writes: 2, autoExtend: i === 0, retryDelay: 20, deadlineMs: pick(short, 2500, 8000) }, { timeout: 60000 }))
    const kills = pick(short, 3, 10)
    for (let i = 0; i < kills; i++) {
      await sleep(pick(short, 500, 600))
      const n = await raw.killConnections()
      h.fault('connections killed', { n })
    }
    await Promise.all(running)
    // Afterwards: every worker acquires and releases cleanly.
    const after = await Promise.all(workers.map((w) => w.cmd('contend', { keys, rounds: 3, ttl, wait: 10000, holdMs: 2, writes: 1, deadlineMs: 30000 })))
    after.forEach((a, i) => h.check(a.grants === 3 && a.errors === 0, `w${i} after the kills: ${a.grants}/3 grants, ${a.errors} errors`))
    // The holder through the kills either kept its lock (and the store agrees) or heard it lost.
    const ok = await until(async () => {
      const p = await holder.cmd('probe', { as: hk })
      const lease = await raw.lease(hk)
      const lost = h.events.some((e) => e.w === holder.id && e.key === hk && e.ev === 'lost')
      return (p.held && lease?.owner === held.owner) || (!p.held && lost)
    }, ttl * 3)
    h.check(ok, 'the holder through the kills neither kept its lock in the store nor heard it lost')
    const errs = h.events.filter((e) => e.ev === 'acquire-error' || e.ev === 'release-error').length
    h.note(`connections killed per fault: ${h.faults.map((f) => f.n).join(', ')}; ${errs} call(s) failed during the kills`)
    h.check(h.faults.every((f) => f.n > 0), 'a kill found no deadbolt connection to kill (the fault was not injected)')
    await holder.cmd('release', { as: hk })
  },
}

function restartScenario(variant) {
  return {
    name: `8-restart-${variant}`,
    title: variant === 'persistent'
      ? 'across a restart of a persistent store tokens never decrease and holders keep or visibly lose their locks'
      : 'across a restart of a store without persistence holders keep or visibly lose their locks and locking works again',
    server: 'own',
    applies: (store) => store.restarts.some((x) => x.id === variant),
    async run(ctx) {
      const { h, store, short } = ctx
      const cfg = store.restarts.find((x) => x.id === variant)
      if (!cfg) { h.note(`no ${variant} restart for ${store.name}`); return }
      // Redis variants need a server with their own persistence settings.
      const { server, dispose } = await ctx.throwaway(cfg.server)
      h.onDispose(dispose)
      const url = server.url
      // The runner reads leftovers and cleans up through ctx.raw, and closes it.
      const raw = (ctx.raw = store.raw(url))
      const ttl = 2000
      h.maxTtl = ttl
      const keys = [h.key('a'), h.key('b')]
      const hk = h.key('held')
      const workers = await Promise.all([0, 1].map((i) => connected(h, `w${i}`, url, { connectTimeout: 2000, responseTimeout: 2000 })))
      const holder = await connected(h, 'holder', url, { connectTimeout: 2000, responseTimeout: 2000 })
      const rounds = pick(short, 15, 60)
      await Promise.all(workers.map((w) => w.cmd('contend', { keys, rounds, ttl, holdMs: 2, writes: 1 })))
      const before = new Map()
      for (const k of keys) before.set(k, await raw.token(k))
      const held = await holder.cmd('hold', { key: hk, ttl, autoExtend: true, extendEvery: 400, writeEvery: 50 })
      const f = h.fault(`restart (${cfg.label})`)
      await server.restart('SIGKILL')
      if (!cfg.tokensSurvive) h.epochs.push(f.t)
      // The holder either keeps its lock (and the store agrees) or visibly loses it.
      let state = null
      const settled = await until(async () => {
        const p = await holder.cmd('probe', { as: hk })
        const lease = await raw.lease(hk).catch(() => null)
        const lost = h.events.some((e) => e.w === holder.id && e.key === hk && e.ev === 'lost')
        state = p.held ? (lease?.owner === held.owner ? 'kept' : 'held-but-not-in-store') : lost ? 'lost' : 'not-held-silently'
        return state === 'kept' || state === 'lost'
      }, ttl * 2 + 3000, 50)
      h.check(settled, `the holder's state after the restart: ${state}`)
      h.note(`holder: ${state}`)
      const afterOut = await Promise.all(workers.map((w) => w.cmd('contend', { keys, rounds, ttl, holdMs: 2, writes: 1 })))
      const errors = afterOut.reduce((a, o) => a + o.errors, 0)
      afterOut.forEach((o, i) => h.check(o.grants > 0, `w${i} got no lock after the restart`))
      if (errors) {
        if (store.replacesConnectionsInCall) h.violate(`${errors} call(s) failed after the restart (pooled connections should be replaced inside the call)`)
        else h.note(`${errors} call(s) failed after the restart`)
      }
      for (const k of keys) {
        const grants = h.events.filter((e) => e.ev === 'acquire' && e.key === k && e.t > f.t).map((e) => BigInt(e.token))
        const min = grants.length ? grants.reduce((a, b) => (a < b ? a : b)) : null
        const max = before.get(k)
        if (cfg.tokensSurvive) h.check(min === null || max === null || min > max, `${k.slice(h.prefix.length)}: token ${min} granted after the restart, not above ${max} from before`)
        else h.note(`${k.slice(h.prefix.length)}: tokens ${max} before, from ${min} after (counters are not persisted)`)
      }
      await holder.cmd('release', { as: hk }).catch(() => {})
    },
  }
}

const stalled = {
  name: '9-store-stalled',
  title: 'with the store stalled every call settles within its timeouts with ERR_LOCK_BACKEND and the held lock is reported lost',
  server: 'throwaway',
  async run({ h, url, server }) {
    const connectTimeout = 1000
    const responseTimeout = 1000
    const ttl = 1500
    h.maxTtl = ttl
    const bound = connectTimeout + responseTimeout + SLACK
    const opts = { connectTimeout, responseTimeout }
    const w = await connected(h, 'w', url, opts)
    await w.cmd('connect', { client: 'second', url, opts })
    const held = { ext: h.key('ext'), rel: h.key('rel'), idle: h.key('idle') }
    for (const key of Object.values(held)) await w.cmd('hold', { key, ttl, autoExtend: true, extendEvery: 300, writeEvery: 50 })
    const x = h.key('x')
    await server.pause()
    const f = h.fault('SIGSTOP store')
    const calls = [
      { op: 'acquire', key: x, opts: { wait: Infinity, ttl } },
      // The acquire above waits for x in this process: a try answers null at once, without
      // asking the store (a try takes no place in the queue), or fails with the store.
      { op: 'tryAcquire', key: x, opts: { ttl }, allowValue: [null] },
      { op: 'inspect', key: x },
      { op: 'ping' },
      { op: 'extend', as: held.ext, allow: ['ERR_LOCK_EXTEND'] },
      { op: 'release', as: held.rel, allowValue: [false] },
      { op: 'connect', url, opts },
      { op: 'close', client: 'second', allowValue: ['closed'] },
    ]
    const results = await Promise.all(calls.map((c) => w.cmd('call', { ...c, guardMs: bound + 5000 }, { timeout: bound + 15000 })
      .catch((err) => ({ op: c.op, hung: true, msg: err.message }))))
    for (let i = 0; i < calls.length; i++) {
      const c = calls[i]
      const r = results[i]
      if (r.hung) { h.violate(`${c.op}: still pending ${bound + 5000} ms into the stall (hangs)`); continue }
      h.check(r.ms <= bound, `${c.op}: settled after ${r.ms.toFixed(0)} ms (connectTimeout ${connectTimeout} + responseTimeout ${responseTimeout} + slack ${SLACK})`)
      if (r.ok) h.check((c.allowValue ?? []).includes(r.value), `${c.op}: resolved ${JSON.stringify(r.value)} with the store stalled`)
      else h.check(r.code === 'ERR_LOCK_BACKEND' || (c.allow ?? []).includes(r.code), `${c.op}: rejected with ${r.code} (${r.name}: ${r.msg})`)
    }
    h.figures.callMs = results.map((r) => r.ms)
    h.note(`calls settled in ${results.map((r) => `${r.op} ${r.hung ? 'HUNG' : `${r.ms.toFixed(0)} ms ${r.ok ? 'ok' : r.code}`}`).join(', ')}`)
    // The idle holder hears of the loss (unreachable) within its lease.
    const lost = await lostOf(h, (e) => e.w === w.id && e.key === held.idle && e.ev === 'lost', ttl + 5000)
    h.check(lost !== null, 'the holder never heard that its lock was lost while the store was stalled')
    if (lost) {
      h.figures.lateness = [lost.t - (f.t + ttl)]
      h.check(lost.reason === 'unreachable', `the loss reason is ${lost.reason}, not unreachable`)
      // The promise: heard by the local deadline (at the latest stall start + ttl), before
      // the server could give the key to anyone else.
      h.check(lost.t - f.t <= ttl + LOSS_SLACK, `the loss was heard ${(lost.t - f.t).toFixed(0)} ms into the stall, after the lease's local deadline (ttl ${ttl} + ${LOSS_SLACK} ms delivery slack)`)
    }
    await sleep(Math.max(0, bound - (h.now() - f.t)))
    h.fault('SIGCONT store')
    server.resume()
    // Things work again.
    let okAfter = false
    let attempts = 0
    for (; attempts < 3 && !okAfter; attempts++) {
      const r = await w.cmd('call', { op: 'acquire', key: h.key('after'), opts: { ttl, wait: 5000 }, guardMs: bound + 5000 }, { timeout: bound + 15000 }).catch((err) => ({ hung: true, msg: err.message }))
      okAfter = r.ok === true && r.value?.released === true
      if (!okAfter) h.note(`after SIGCONT, attempt ${attempts + 1}: ${r.hung ? 'hung' : `${r.code} ${r.msg}`}`)
    }
    h.check(okAfter, 'acquire + release did not work again after SIGCONT (3 attempts)')
    for (const key of [held.ext, held.idle]) await w.cmd('release', { as: key }, { timeout: bound + 10000 }).catch(() => {})
  },
}

const cancelStorm = {
  name: '10-cancel-storm',
  title: 'a thousand aborted acquisitions leave nothing behind in the store or the client',
  server: 'shared',
  async run({ h, url }) {
    h.maxTtl = 5000
    const busyKeys = [h.key('busy0'), h.key('busy1')]
    const freeKeys = [h.key('free0'), h.key('free1')]
    const holder = await connected(h, 'holder', url)
    for (const key of busyKeys) await holder.cmd('hold', { key, ttl: 5000, autoExtend: true, writeEvery: 200 })
    const w = await connected(h, 'storm', url)
    const r = await w.cmd('storm', { busyKeys, freeKeys, n: 1000, wait: 5000 }, { timeout: 60000 })
    h.fault('1000 aborts')
    h.note(`outcomes: ${JSON.stringify(r.byKind)}`)
    h.check(r.granted === 0, `${r.granted} acquisition(s) resolved with a lock although aborted before any I/O completed`)
    h.check(r.otherErrors === 0, `${r.otherErrors} aborted acquisition(s) rejected with something other than the signal's reason`)
    let stats = null
    const clean = await until(async () => {
      stats = await w.cmd('stats', {})
      return stats.held === 0 && stats.waiting === 0 && stats.scheduled === 0 && stats.subscriptions === 0
    }, 5000, 50)
    h.check(clean, `stats after the storm: ${JSON.stringify(stats)}`)
    for (const key of busyKeys) await holder.cmd('release', { as: key })
  },
}

const threads = {
  name: '11-worker-terminate',
  title: 'a terminated worker thread neither keeps extending its lock nor takes one it queued for',
  server: 'throwaway',
  async run({ h, url, raw }) {
    const ttl = 1000
    h.maxTtl = ttl
    const k1 = h.key('held-by-thread')
    const k2 = h.key('waited-by-thread')
    h.key('held-by-thread:probe'); h.key('waited-by-thread:probe')
    const host = await connected(h, 'host', url)
    const other = await connected(h, 'other', url)
    await other.cmd('hold', { key: k2, ttl: 3000, autoExtend: true, writeEvery: 100 })
    const t1 = await host.cmd('thread', { name: 't1', url, key: k1, mode: 'hold', ttl })
    const t2 = await host.cmd('thread', { name: 't2', url, key: k2, mode: 'wait', ttl })
    if (t1.error || t2.error) { h.violate(`thread start-up: ${t1.error ?? ''} ${t2.error ?? ''}`); return }
    h.check(t2.waiting > 0, 'the waiting thread never queued')
    const f1 = await host.cmd('terminate', { name: 't1' })
    h.fault('terminate holding thread')
    const f2 = await host.cmd('terminate', { name: 't2' })
    h.fault('terminate waiting thread')
    await other.cmd('release', { as: k2 })
    const releasedAt = h.now()
    // Watch the store: k1 must not be extended past terminate + ttl and must be gone by then
    // (+ slack); k2 must never be taken by the terminated waiter.
    let extended = 0
    let goneAt = null
    let stolen = null
    const end = f1.t + ttl + SLACK + 1000
    while (h.now() < end) {
      const [l1, l2] = await Promise.all([raw.lease(k1), raw.lease(k2)])
      const t = h.now()
      if (l1 && t + l1.remainingMs > f1.t + ttl + 300) extended++
      if (!l1 && goneAt === null) goneAt = t
      if (l2 && l2.owner.startsWith(t2.ownerPrefix)) stolen = l2
      await sleep(50)
    }
    h.check(extended === 0, `the terminated thread's lease was extended after terminate (${extended} sample(s) expire later than terminate + ttl)`)
    h.check(goneAt !== null && goneAt - f1.t <= ttl + SLACK, `the terminated thread's lock is ${goneAt === null ? 'still held' : `gone only ${(goneAt - f1.t).toFixed(0)} ms`} after terminate (ttl ${ttl})`)
    if (goneAt !== null) h.figures.takeover = [goneAt - f1.t]
    h.check(stolen === null, `the terminated thread's queued acquire took ${k2.slice(h.prefix.length)} after it was released`)
    void f2; void releasedAt
  },
}

const election = {
  name: '12-election',
  title: 'an election with the leader killed and paused has at most one accepted leader per term',
  server: 'throwaway',
  async run({ h, url, short }) {
    const ttl = 1000
    h.maxTtl = ttl
    const name = h.key('leader')
    const cycles = pick(short, 1, 3)
    let seq = 0
    const candidates = []
    const spawn = async () => {
      const w = await connected(h, `c${seq++}`, url)
      await w.cmd('elect', { key: name, ttl, retryDelay: 50, writeEvery: 20 })
      candidates.push(w)
      return w
    }
    for (let i = 0; i < 3; i++) await spawn()
    h.figures.takeover = []
    let leader = await grantOf(h, (e) => e.key === name, 10000, 'a first leader')
    for (let c = 0; c < cycles; c++) {
      // kill -9 the leader
      let victim = candidates.find((w) => w.id === leader.w)
      let f = h.fault('kill -9 leader', { w: victim.id })
      await victim.kill()
      candidates.splice(candidates.indexOf(victim), 1)
      leader = await grantOf(h, (e) => e.key === name && e.t > f.t, ttl + 10000, 'a leader after the kill')
      h.figures.takeover.push(leader.t - f.t)
      h.check(leader.t - f.t <= ttl + SLACK, `new leader ${(leader.t - f.t).toFixed(0)} ms after the kill (ttl ${ttl} + slack)`)
      await spawn()
      // SIGSTOP the leader past its ttl
      victim = candidates.find((w) => w.id === leader.w)
      await victim.pause()
      f = h.fault('SIGSTOP leader', { w: victim.id })
      leader = await grantOf(h, (e) => e.key === name && e.t > f.t, ttl + 10000, 'a leader after the pause')
      h.figures.takeover.push(leader.t - f.t)
      h.check(leader.t - f.t <= ttl + SLACK, `new leader ${(leader.t - f.t).toFixed(0)} ms after the pause (ttl ${ttl} + slack)`)
      await until(() => h.resource.log.some((r) => r.key === name && r.w === leader.w && r.accepted), 5000, 10)
      const cont = h.fault('SIGCONT leader', { w: victim.id })
      victim.signal('SIGCONT')
      const revoked = await lostOf(h, (e) => e.key === name && e.w === victim.id && e.ev === 'lost' && e.t > f.t, 10000)
      h.check(revoked !== null, 'the resumed former leader was not told it was revoked')
      const p = await victim.cmd('probe', { as: name })
      h.check(p.held === false, 'the resumed former leader still reads isLeader === true')
      const accepted = h.resource.log.filter((r) => r.key === name && r.w === victim.id && r.t > cont.t && r.accepted).length
      h.check(accepted === 0, `${accepted} write(s) of the resumed former leader were accepted`)
    }
    for (const w of candidates) await w.cmd('release', { as: name }).catch(() => {})
  },
}

const namespace = {
  name: '13-side-key-names',
  title: "lock names that look like deadbolt's side keys are independent locks",
  server: 'shared',
  async run({ h, url, store }) {
    h.maxTtl = 2000
    const a = h.key('a')
    const b = h.key('b')
    const lookalikeA = legacySideKey(a, 'fence')
    const lookalikeB = legacySideKey(b, 'fence')
    h.names.add(lookalikeA); h.names.add(lookalikeB)
    const w = await connected(h, 'w', url)
    // a, then a lock named like a's fencing counter.
    const r1 = await w.cmd('call', { op: 'acquire', key: a, opts: { ttl: 2000, wait: 1000 } })
    h.check(r1.ok && r1.value?.released, `acquire ${a.slice(h.prefix.length)}: ${r1.code ?? ''} ${r1.msg ?? ''}`)
    const r2 = await w.cmd('call', { op: 'tryAcquire', key: lookalikeA, opts: { ttl: 2000 } })
    h.check(r2.ok && r2.value !== null, `tryAcquire("${lookalikeA.replace(h.prefix, '<prefix>')}"), a free lock name, gave ${r2.ok ? 'null (busy)' : `${r2.code} ${r2.msg}`}`)
    // A lock named like b's counter held, then b.
    await w.cmd('hold', { key: lookalikeB, ttl: 2000, autoExtend: true, writeEvery: 100 })
    const r3 = await w.cmd('call', { op: 'tryAcquire', key: b, opts: { ttl: 2000 } })
    h.check(r3.ok && r3.value !== null, `tryAcquire("${b.replace(h.prefix, '<prefix>')}") while "${lookalikeB.replace(h.prefix, '<prefix>')}" is held gave ${r3.ok ? 'null (busy)' : `${r3.code} ${r3.msg}`}`)
    const rel = await w.cmd('release', { as: lookalikeB }).catch((err) => err.message)
    h.check(rel === true, `release of "${lookalikeB.replace(h.prefix, '<prefix>')}" gave ${rel}`)
    void store
  },
}

const sqliteReplaced = {
  name: '14-sqlite-file-replaced',
  title: 'a SQLite file deleted or renamed over under a holder: the loss is heard with its cause, the key is taken in the new file, the old holder is fenced off',
  server: 'own',
  applies: (store) => store.name === 'sqlite',
  async run(ctx) {
    const { h, short } = ctx
    const fs = require('node:fs')
    const os = require('node:os')
    const path = require('node:path')
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-torture-sqlite-'))
    h.onDispose(() => fs.rmSync(dir, { recursive: true, force: true }))
    const file = path.join(dir, 'locks.db')
    const url = `sqlite://${file}`
    ctx.raw = ctx.store.raw(url)
    const ttl = 1000
    const every = 250
    h.maxTtl = ttl
    const holder = await connected(h, 'holder', url)
    const waiter = await connected(h, 'waiter', url)
    const ways = {
      // rm locks.db*: the next process to open the path creates a new file.
      delete: () => { for (const f of ['', '-wal', '-shm']) fs.rmSync(`${file}${f}`, { force: true }) },
      // mv new.db locks.db: a database made and closed elsewhere takes the name.
      rename: async () => {
        const made = path.join(dir, 'new.db')
        const maker = await require('..').connect(`sqlite://${made}`)
        await maker.ping()
        await maker.close()
        fs.renameSync(made, file)
      },
    }
    const rounds = pick(short, ['delete', 'rename'], ['delete', 'rename', 'delete', 'rename', 'delete', 'rename'])
    const heard = []
    const takeovers = { delete: [], rename: [] }
    for (const [i, how] of rounds.entries()) {
      const key = h.key(`${how}${i}`)
      const name = key.slice(h.prefix.length)
      // The holder keeps writing after the loss (stale: true): the resource must refuse those
      // writes once the waiter, granted in the new file, has written. The waiter read the
      // holder's lease from the old file, so it must not be granted before the holder stops
      // reading held === true (no overlap), although the new file is empty after a delete.
      await holder.cmd('hold', { key, ttl, autoExtend: true, extendEvery: every, stale: true, writeEvery: 20 })
      waiter.cmd('hold', { key, ttl, autoExtend: true, wait: 20000, retryDelay: 50, writeEvery: 20 }).catch(() => {})
      await queued(waiter)
      await ways[how]()
      const f = h.fault(`${how} the database file`, { w: holder.id })
      const lost = await lostOf(h, (e) => e.key === key && e.w === holder.id, every + LOSS_SLACK + SLACK)
      h.check(lost !== null, `${name}: the holder never heard that its lock was lost`)
      if (lost) {
        heard.push(lost.t - f.t)
        h.check(lost.cause === 'ERR_LOCK_STORE_REPLACED', `${name}: the loss came with cause ${lost.cause} (reason ${lost.reason}), not ERR_LOCK_STORE_REPLACED`)
      }
      const g = await grantOf(h, (e) => e.key === key && e.w === waiter.id, 3 * ttl + SLACK, `the waiter's grant of ${name}`)
      ;(h.figures.takeover ??= []).push(g.t - f.t)
      takeovers[how].push(g.t - f.t)
      await until(() => h.resource.log.some((r) => r.key === key && r.w === waiter.id && r.accepted), 5000, 10)
      const p = await holder.cmd('probe', { as: key })
      h.check(p.held === false && p.aborted === true, `${name}: the holder still reads held ${p.held}, signal aborted ${p.aborted}`)
      await holder.cmd('release', { as: key })
      await waiter.cmd('release', { as: key })
    }
    const span = (xs) => (xs.length ? `${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)} ms` : '-')
    h.note(`loss heard ${span(heard)} after the file changed (heartbeat every ${every} ms); the waiter granted ${span(takeovers.delete)} after a delete, ${span(takeovers.rename)} after a rename (the old lease kept busy until it ends)`)
  },
}

const lateReply = {
  name: '15-late-reply',
  title: 'an acquisition whose reply comes after its response timeout leaves the key free within the reply delay + one response timeout',
  server: 'throwaway',
  async run({ h, url, short, server, raw }) {
    const { tcpProxy } = require('../__test__/fixtures/tcp-proxy')
    const responseTimeout = 1000
    const hold = 1500
    const ttl = 8000
    h.maxTtl = ttl
    // Requests reach the store at once; its replies come back `hold` ms later, after the
    // late worker's response timeout.
    const proxy = await tcpProxy(server.port)
    h.onDispose(() => proxy.close())
    // A SQL call is bounded by connectTimeout + responseTimeout: below `hold`.
    const late = await connected(h, 'late', url.replace(`:${server.port}`, `:${proxy.port}`), { connectTimeout: 400, responseTimeout })
    const direct = await connected(h, 'direct', url)
    // A few acquisitions at once first, so that a SQL pool has connections open with its
    // statements prepared: the late request is then the one that takes the lock.
    const warm = await Promise.all([0, 1, 2, 3].map((i) => late.cmd('call', { op: 'acquire', key: h.key(`warm${i}`), opts: { ttl, wait: 5000 } })))
    warm.forEach((w, i) => h.check(w.ok, `warm-up ${i}: ${w.code} ${w.msg}`))
    h.figures.takeover = []
    const rounds = pick(short, 4, 12)
    for (let r = 0; r < rounds; r++) {
      const key = h.key(`k${r}`)
      const op = r % 2 === 0 ? 'acquire' : 'tryAcquire'
      proxy.holdReplies(hold)
      const res = await late.cmd('call', { op, key, opts: { ttl, wait: 0 } })
      // The rejection: from here the store answers again within `hold`.
      const f = h.fault('replies held back', { op })
      proxy.holdReplies(0)
      h.check(!res.ok && res.code === 'ERR_LOCK_BACKEND', `round ${r}: ${op} with its reply held back gave ${res.ok ? JSON.stringify(res.value) : `${res.code} ${res.msg}`}, not ERR_LOCK_BACKEND`)
      const free = await until(async () => (await raw.lease(key)) === null, ttl + SLACK, 10)
      const freeMs = h.now() - f.t
      h.figures.takeover.push(freeMs)
      h.check(free, `round ${r}: the key was still taken ${(ttl + SLACK) / 1000} s after ${op} was rejected`)
      h.check(!free || freeMs <= hold + responseTimeout, `round ${r}: the key was free only ${freeMs.toFixed(0)} ms after ${op} was rejected (promise: ${hold} + ${responseTimeout})`)
      // Another owner takes it while the clean-up may still be sending releases: it keeps it.
      await direct.cmd('hold', { key, ttl: 3000, wait: 5000, writeEvery: 50 })
      await sleep(pick(short, 300, 1000))
      const p = await direct.cmd('probe', { as: key })
      const lease = await raw.lease(key)
      h.check(p?.held === true && lease !== null, `round ${r}: the next owner's lock did not survive the clean-up (held ${p?.held}, in the store: ${lease !== null})`)
      const rel = await direct.cmd('release', { as: key }).catch((err) => err.message)
      h.check(rel === true, `round ${r}: the next owner's release gave ${rel}`)
    }
  },
}

const SCENARIOS = [
  baseline, holderKill, holderStop, jsBlocked, lateGrant, frozen, connKill,
  restartScenario('no-persistence'), restartScenario('persistent'),
  stalled, cancelStorm, threads, election, namespace, sqliteReplaced, lateReply,
  ...FAILOVER_SCENARIOS,
]

/** Whether scenario `sc` runs on `store`: its own rule, and the store's list if it has one. */
function applies(sc, store) {
  return (!sc.applies || sc.applies(store)) && (!store.only || store.only.includes(sc.name))
}


module.exports = { SCENARIOS, applies }
