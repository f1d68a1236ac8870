'use strict'
// The failover scenarios (Redis only): workers contend on a few keys through a Redis Cluster
// or Sentinel while the topology changes under them, on throwaway servers (the test
// fixtures' clusters and sentinels). Each reports, besides the common figures, the calls that
// failed (`failed`) and the time from the change to the first grant after it or the last
// failed call, whichever is later (`takeoverMs`, "time to recover").
//
// Invariants: no stale write accepted by the fenced resource and no token granted twice, as
// everywhere. A coordinated change (a slot migration, `CLUSTER FAILOVER`) loses no write, so
// overlaps must be 0 there too. `SENTINEL FAILOVER` promotes a replica that may lack the
// latest grant (replication is asynchronous, as the README says): two clients can then both
// read `held` across it, so its overlaps are a figure, not a violation, and fencing is what
// must refuse the stale holder.

const Redis = require('ioredis')
const { startRedisCluster, startRedisSentinel } = require('../__test__/fixtures/redis-server')
const { sleep } = require('./harness')
const { hashSlot, fenceKey } = require('./stores')

const pick = (short, s, f) => (short ? s : f)
/** The fixtures skip through node:test's `t`; here a missing redis-server was ruled out. */
const noSkip = { skip() {} }

async function until(fn, ms, what, every = 50) {
  const end = Date.now() + ms
  for (let i = 0; i < 100000; i++) {
    if (await fn().catch(() => false)) return
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`)
    await sleep(every)
  }
}

/** Keys under `prefix` (leftover check and clean-up) on plain connections to every node. */
class NodesRaw {
  constructor(urls) { this.set(urls) }

  set(urls) {
    this.clients?.forEach((c) => c.disconnect())
    this.clients = urls.map((u) => {
      const c = new Redis(u, { maxRetriesPerRequest: 2, retryStrategy: (n) => Math.min(n * 50, 500) })
      c.on('error', () => {})
      return c
    })
  }

  /** Lock keys and payloads under `prefix` on every primary (replicas hold copies). */
  async leftover(prefix) {
    const found = new Set()
    for (const c of this.clients) {
      if ((await c.role())[0] !== 'master') continue
      let cursor = '0'
      for (let i = 0; i < 10000; i++) {
        const [next, keys] = await c.scan(cursor, 'MATCH', `*${prefix}*`, 'COUNT', 1000)
        keys.forEach((k) => found.add(k))
        cursor = next
        if (cursor === '0') break
      }
    }
    return { extra: [...found], all: [...found] }
  }

  async cleanup() { /* the servers are thrown away */ }
  async close() { this.clients.forEach((c) => c.disconnect()) }
}

/**
 * Starts `n` contending workers on `keys`, connected to `target`; `stop()` ends their loops
 * (at the latest `ms` after the start) and resolves their `contend` replies.
 */
async function load(h, target, keys, n, ms, opts = {}, ttl = 1000) {
  const workers = []
  for (let i = 0; i < n; i++) {
    const w = await h.worker(`w${i}`)
    await w.cmd('connect', { url: target, opts: { responseTimeout: 1000, ...opts } })
    workers.push(w)
  }
  // Once stopped, a worker finishes the round it is in (a wait of up to 10 s).
  const done = Promise.all(workers.map((w) => w.cmd('contend', {
    keys, rounds: 1e6, ttl, wait: 10000, holdMs: 4, writes: 2, retryDelay: 20, deadlineMs: ms,
  }, { timeout: ms + 30000 })))
  done.catch(() => {})
  return {
    async stop() {
      await Promise.all(workers.map((w) => w.cmd('stopContending').catch(() => {})))
      return done
    },
  }
}

/** Waits until the workers have been granted `more` further locks. */
async function granted(h, more, ms = 20000) {
  const base = h.events.filter((e) => e.ev === 'acquire').length
  await until(async () => h.events.filter((e) => e.ev === 'acquire').length >= base + more, ms, `${more} grants`, 20)
}

/** The highest token granted for `key` so far (0n: none). */
function maxToken(h, key) {
  return h.events.filter((e) => e.ev === 'acquire' && e.key === key).reduce((m, e) => (BigInt(e.token) > m ? BigInt(e.token) : m), 0n)
}

/** How far tokens went back (the largest drop below a token granted before, per key), or 0. */
function tokenDrop(h) {
  const top = new Map()
  let drop = 0n
  for (const e of h.events) {
    if (e.ev !== 'acquire') continue
    const t = BigInt(e.token)
    const max = top.get(e.key) ?? 0n
    if (t <= max && max - t + 1n > drop) drop = max - t + 1n
    if (t > max) top.set(e.key, t)
  }
  return drop
}

/** Failed calls, and the time to recover from each change (see the file's comment). */
function recovery(h) {
  const failed = h.events.filter((e) => e.ev === 'acquire-error' || e.ev === 'release-error')
  h.faults.forEach((f, i) => {
    const next = h.faults[i + 1]?.t ?? Infinity
    const after = h.events.filter((e) => e.t > f.t && e.t < next)
    const firstGrant = after.find((e) => e.ev === 'acquire')
    const lastError = [...after].reverse().find((e) => e.ev === 'acquire-error' || e.ev === 'release-error')
    const ends = [firstGrant?.t, lastError?.t].filter((t) => t !== undefined)
    if (ends.length) h.figures.takeover.push(Math.max(...ends) - f.t)
    h.check(firstGrant !== undefined, `no grant after ${f.kind}`)
  })
  return failed.length
}

/** The workers' outcome: every worker kept being granted, and errors are counted. */
function settle(h, out) {
  const failed = recovery(h)
  h.figures.failed = failed
  for (const [i, o] of out.entries()) h.check(o.grants > 0, `worker w${i} was never granted a lock`)
  const lost = h.events.filter((e) => e.ev === 'lost').length
  if (lost) h.note(`${lost} lock(s) reported lost`)
}

// ─────────────────────────────── cluster: slot migration ───────────────────────────────

/** The node id of the cluster node on `port`. */
const myId = (c) => c.cluster('MYID')

/**
 * Moves `slot` from the primary `from` to the primary `to` by hand, as `redis-cli --cluster
 * reshard` does, one key at a time with `gapMs` between keys, so that for a while a lock key
 * and its slot's fencing counter are on different nodes (the counter goes first, then the
 * rest, or the reverse): scripts then get TRYAGAIN (their keys are split) or ASK, never a
 * counter without its history. `all`: every node, each told the new owner at the end.
 */
async function migrate(from, to, all, slot, { counterFirst, gapMs }) {
  const [fromId, toId] = await Promise.all([myId(from.c), myId(to.c)])
  const moved = { counters: 0, others: 0 }
  await to.c.cluster('SETSLOT', slot, 'IMPORTING', fromId)
  await from.c.cluster('SETSLOT', slot, 'MIGRATING', toId)
  for (let i = 0; i < 1000; i++) {
    const keys = await from.c.clusterBuffer('GETKEYSINSLOT', slot, 100)
    if (keys.length === 0) break
    const isCounter = (k) => k[0] === 0xff && k.includes('deadbolt:fence:')
    keys.sort((a, b) => (isCounter(a) === isCounter(b) ? 0 : isCounter(a) === counterFirst ? -1 : 1))
    for (const k of keys) {
      // A key deleted meanwhile (a released lock) answers NOKEY: nothing to move.
      const r = await from.c.migrate('127.0.0.1', to.port, k, 0, 5000)
      if (r === 'OK') moved[isCounter(k) ? 'counters' : 'others']++
      await sleep(gapMs)
    }
  }
  // The new owner first, then the old one (it stops redirecting with ASK), then the rest.
  await to.c.cluster('SETSLOT', slot, 'NODE', toId)
  await from.c.cluster('SETSLOT', slot, 'NODE', toId)
  await Promise.all(all.filter((n) => n !== from && n !== to).map((n) => n.c.cluster('SETSLOT', slot, 'NODE', toId).catch(() => {})))
  return moved
}

/**
 * What every scenario here starts on: throwaway `servers` (a cluster or a Sentinel set),
 * stopped at the end and searched for leftovers on every node of `urls`; leases of at most
 * 1 s, and the takeover figures.
 */
function onOwnServers(ctx, servers, urls) {
  const { h } = ctx
  h.maxTtl = 1000
  h.figures.takeover = []
  h.onDispose(() => servers.stop())
  ctx.raw = new NodesRaw(urls)
}

/** Workers contending on three keys through `sentinel`'s primary (`options` added to the target). */
function sentinelLoad(ctx, sentinel, options = {}) {
  const { h, short } = ctx
  const keys = [h.key('a'), h.key('b'), h.key('c')]
  const target = { sentinels: sentinel.urls, name: sentinel.name, ...options }
  return load(h, target, keys, pick(short, 3, 4), pick(short, 60000, 90000))
}

/** Stops the workers and checks what they saw; notes how far tokens went back (`why`), if they did. */
async function settleFailover(h, contending, why) {
  settle(h, await contending.stop())
  const drop = tokenDrop(h)
  if (drop > 0n) h.note(`tokens went back by up to ${drop} ${why}; the resource refused ${h.resource.log.filter((r) => !r.accepted).length} write(s)`)
}

const slotMigration = {
  name: '16-cluster-migration',
  title: 'keys whose slots move between cluster primaries under load keep one holder and increasing tokens',
  server: 'own',
  applies: (store) => store.name === 'redis',
  async run(ctx) {
    const { h, short } = ctx
    const cluster = await startRedisCluster(noSkip, 3)
    onOwnServers(ctx, cluster, cluster.urls)
    const nodes = cluster.nodes.map((n) => {
      const c = new Redis(n.url, { maxRetriesPerRequest: 1 })
      c.on('error', () => {})
      return { port: n.port, c }
    })
    h.onDispose(() => nodes.forEach((n) => n.c.disconnect()))
    // Per slot moved: a contended key and one held all along (its heartbeat extends it
    // while the slot is split), so that every move carries a lock key besides the counter.
    const run = h.prefix.split(':')[2]
    const tags = ['a', 'b', 'c'].map((t) => `{${run}${t}}`)
    const keys = tags.map((t) => h.key(`${t}contended`))
    const heldKeys = tags.map((t) => h.key(`${t}held`))
    const moves = pick(short, 2, 6)
    const holder = await h.worker('holder')
    await holder.cmd('connect', { url: { cluster: cluster.urls }, opts: {} })
    // A lease longer than the split: its extensions wait the split out (TRYAGAIN, retried).
    for (const key of heldKeys) await holder.cmd('hold', { key, ttl: 3000, autoExtend: true, extendEvery: 250, writeEvery: 50 })
    // The default responseTimeout (5 s): a call retries TRYAGAIN until the split ends; and a
    // lease longer than the split, which a grant may have waited out.
    const contending = await load(h, { cluster: cluster.urls }, keys, pick(short, 3, 4), pick(short, 60000, 90000), { responseTimeout: 5000 }, 3000)
    await granted(h, 20)
    for (let m = 0; m < moves; m++) {
      const key = keys[m % keys.length]
      const slot = hashSlot(Buffer.from(key))
      const owners = await cluster.primaries()
      const fromPort = owners.find((p) => p.slots.some(([a, b]) => a <= slot && slot <= b)).port
      const toPort = owners.find((p) => p.port !== fromPort).port
      const from = nodes.find((n) => n.port === fromPort)
      const to = nodes.find((n) => n.port === toPort)
      h.fault(`migrate slot ${slot}`, { from: fromPort, to: toPort })
      const before = maxToken(h, key)
      const moved = await migrate(from, to, nodes, slot, { counterFirst: m % 2 === 0, gapMs: 400 })
      h.note(`slot ${slot}: counter moved ${m % 2 === 0 ? 'before' : 'after'} ${moved.others} lock key(s), 400 ms apart`)
      // The counter arrived with its history: it is not below a token already granted.
      const counter = await to.c.get(fenceKey(key))
      h.check(counter !== null && BigInt(counter) >= before, `slot ${slot}: the counter on its new node is ${counter}, below token ${before} granted before the move`)
      await granted(h, 10)
    }
    const out = await contending.stop()
    settle(h, out)
    for (const key of heldKeys) {
      const ok = await holder.cmd('release', { as: key }).catch((err) => err.message)
      h.check(ok === true, `the lock held across its slot's moves was released with ${ok}`)
    }
    h.check(h.events.filter((e) => e.ev === 'lost').length === 0, 'a lock was lost while its slot moved')
    h.check(h.figures.failed === 0, `${h.figures.failed} call(s) failed while slots moved`)
  },
}

// ─────────────────────────────── cluster: CLUSTER FAILOVER ───────────────────────────────

const clusterFailover = {
  name: '17-cluster-failover',
  title: 'CLUSTER FAILOVER of the primary serving contended keys, under load',
  server: 'own',
  applies: (store) => store.name === 'redis',
  async run(ctx) {
    const { h, short } = ctx
    const cluster = await startRedisCluster(noSkip, 3, { replicas: 1 })
    onOwnServers(ctx, cluster, cluster.urls)
    // Three keys in the slots of one primary: its failover concerns every lock in play.
    const owners = await cluster.primaries()
    const victim = owners[0]
    const inVictim = (k) => { const s = hashSlot(Buffer.from(k)); return victim.slots.some(([a, b]) => a <= s && s <= b) }
    const keys = []
    for (let i = 0; keys.length < 3 && i < 1000; i++) if (inVictim(`${h.prefix}k${i}`)) keys.push(h.key(`k${i}`))
    const rounds = pick(short, 1, 2)
    const contending = await load(h, { cluster: cluster.urls }, keys, pick(short, 3, 4), pick(short, 60000, 90000))
    await granted(h, 20)
    let primaryPort = victim.port
    for (let r = 0; r < rounds; r++) {
      const raw = new Redis(`redis://127.0.0.1:${primaryPort}`, { maxRetriesPerRequest: 1 })
      raw.on('error', () => {})
      const id = await raw.cluster('MYID')
      // After a failover the old primary is listed as the new one's replica once it follows.
      let replicaLine
      await until(async () => {
        replicaLine = (await raw.cluster('REPLICAS', id)).find((l) => !l.includes('fail'))
        return replicaLine !== undefined && (await raw.info('replication')).includes('state=online')
      }, 20000, 'a replica in sync')
      raw.disconnect()
      const replicaPort = Number(replicaLine.split(' ')[1].split('@')[0].split(':')[1])
      const replica = new Redis(`redis://127.0.0.1:${replicaPort}`, { maxRetriesPerRequest: 1 })
      replica.on('error', () => {})
      h.fault('CLUSTER FAILOVER', { from: primaryPort, to: replicaPort })
      await replica.cluster('FAILOVER')
      await until(async () => (await replica.role())[0] === 'master', 15000, 'the replica to be promoted')
      replica.disconnect()
      await until(async () => (await cluster.primaries()).some((p) => p.port === replicaPort && p.slots.length > 0), 15000, 'the cluster to name the new primary')
      primaryPort = replicaPort
      await granted(h, 20)
    }
    const out = await contending.stop()
    settle(h, out)
    h.check(h.figures.failed === 0, `${h.figures.failed} call(s) failed across CLUSTER FAILOVER`)
  },
}

// ─────────────────────────────── Sentinel: SENTINEL FAILOVER ───────────────────────────────

function sentinelFailover(variant) {
  const acked = variant === 'wait-replicas'
  return {
    name: acked ? '19-sentinel-failover-wait' : '18-sentinel-failover',
    title: `SENTINEL FAILOVER under load${acked ? ' with waitReplicas: 1' : ''}: fencing refuses every stale holder`,
    server: 'own',
    applies: (store) => store.name === 'redis',
    async run(ctx) {
      const { h, short } = ctx
      // Asynchronous replication: two holders across the failover are the documented hazard.
      h.overlapsAllowed = 'SENTINEL FAILOVER promotes a replica that may lack the latest grant'
      // Without acknowledgements, the old primary grants until the sentinels demote it, to
      // clients that have not switched yet, below the tokens of the new one (its counters
      // were lifted, see src/store/redis/sentinel.rs): such a grant can follow a higher
      // release. A token granted twice stays a violation.
      if (!acked) h.tokensMayRegress = 'the old primary grants until it is demoted'
      // One replica, so `waitReplicas: 1` is every replica: with fewer acknowledgements than
      // replicas, a replica the old primary still feeds can acknowledge a grant that the
      // promoted one never sees (one run with two replicas and waitReplicas: 1 had 2 stale
      // writes accepted).
      const sentinel = await startRedisSentinel(noSkip, 1)
      onOwnServers(ctx, sentinel, sentinel.servers.map((s) => s.url))
      const rounds = pick(short, 1, 2)
      const contending = await sentinelLoad(ctx, sentinel, acked ? { waitReplicas: 1, waitTimeout: 300 } : {})
      await granted(h, 20)
      for (let r = 0; r < rounds; r++) {
        const before = await sentinel.primaryPort()
        h.fault('SENTINEL FAILOVER', { from: before })
        await sentinel.failover()
        await until(async () => (await sentinel.primaryPort()) !== before, 15000, 'the replica to be promoted')
        const old = sentinel.servers.find((s) => s.port === before)
        const c = new Redis(old.url, { maxRetriesPerRequest: 1 })
        c.on('error', () => {})
        await until(async () => (await c.info('replication')).includes('master_link_status:up'), 30000, 'the old primary to follow the new one')
        c.disconnect()
        await granted(h, 20)
      }
      await settleFailover(h, contending, 'after the failover')
    },
  }
}

// ───────────────── Sentinel: two failovers, the second to a replica left behind ─────────────────

/**
 * Issue 46's schedule: `SENTINEL FAILOVER`, then the new primary SIGSTOPped until the
 * sentinels fail over again, to a replica that could not follow it (a wrong `masterauth`, set
 * once it follows the first primary) and so lacks every grant and counter lift made on it;
 * the first primary is never promoted again (`replica-priority 0`) and is demoted by hand
 * (the sentinels do it seconds later). Tokens of the last primary must be above every token
 * drawn before: none granted twice (the old primary's grants until its demotion may be below
 * released ones, as in 18).
 */
const sentinelDoubleFailover = {
  name: '20-sentinel-double-failover',
  title: 'SENTINEL FAILOVER, then the new primary stopped until a replica that missed its history is promoted: no token granted twice',
  server: 'own',
  applies: (store) => store.name === 'redis',
  async run(ctx) {
    const { h, short } = ctx
    h.overlapsAllowed = 'a promoted replica may lack the latest grant'
    h.tokensMayRegress = 'the old primary grants until it is demoted'
    const sentinel = await startRedisSentinel(noSkip, 2, { args: [['--replica-priority', '0'], [], ['--replica-priority', '200']] })
    onOwnServers(ctx, sentinel, sentinel.servers.map((s) => s.url))
    const [a, b, c] = sentinel.servers
    const raws = [a, c].map((s) => { const r = new Redis(s.url, { maxRetriesPerRequest: 1 }); r.on('error', () => {}); return r })
    h.onDispose(() => raws.forEach((r) => r.disconnect()))
    const [ra, rc] = raws
    const contending = await sentinelLoad(ctx, sentinel)
    await granted(h, 50)
    await rc.config('SET', 'masterauth', 'not-the-password')
    h.fault('SENTINEL FAILOVER', { from: a.port, to: b.port })
    await sentinel.failover()
    await until(async () => (await sentinel.primaryPort()) === b.port, 15000, 'B to be promoted')
    await until(async () => /master_port:(\d+)/.exec(await rc.info('replication'))?.[1] === String(b.port), 15000, 'C to be told to follow B')
    await ra.replicaof('127.0.0.1', b.port)
    await granted(h, pick(short, 200, 500))
    h.fault('SIGSTOP the new primary', { port: b.port })
    const stoppedAt = Date.now()
    b.pause()
    try {
      await until(async () => (await sentinel.primaryPort()) === c.port, 30000, 'C to be promoted')
    } finally {
      b.resume()
    }
    h.note(`B stopped ${Date.now() - stoppedAt} ms, until the sentinels promoted C`)
    await granted(h, pick(short, 200, 500), 30000)
    await settleFailover(h, contending, "(the old primary's, until demoted)")
  },
}

const FAILOVER_SCENARIOS = [slotMigration, clusterFailover, sentinelFailover('plain'), sentinelFailover('wait-replicas'), sentinelDoubleFailover]

module.exports = { FAILOVER_SCENARIOS, migrate }
