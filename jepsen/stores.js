'use strict'
// The store configurations the harness can run on, by registry name, each started privately
// on free loopback ports (never the developer's shared servers) and stopped afterwards. An
// environment says how workers reach it (its endpoints, which the harness puts behind a
// relay per worker, and the URL made from the relays' ports), which servers the nemesis may
// pause, kill and restart, how to kill deadbolt's connections, and what fault kinds apply.
// The servers themselves come from the torture suite and the test fixtures.

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { randomBytes } = require('node:crypto')
const { ThrowawayRedis, ThrowawayMysql, stopProcess, sleep } = require('../torture/servers')
const { STORES: TORTURE_STORES } = require('../torture/stores')
const { ThrowawayPostgres } = require('../__test__/fixtures/postgres')
const { startEtcd, etcdInstalled } = require('../__test__/fixtures/etcd')
const { startDynalite, dynaliteInstalled, TEST_CREDENTIALS } = require('../__test__/fixtures/dynalite')
const { startSentinelSet, startCluster, ask, info, until, killClients } = require('./topologies')
const { clockShimLib, ClockShim } = require('./clock')

const rawOf = (name) => TORTURE_STORES.find((s) => s.name === name).raw
const PROCESS = ['pause-holder', 'kill-holder', 'stall']
const NETWORK = ['net-latency', 'net-hold', 'net-drop', 'net-blackhole', 'net-reset', 'net-cut-one']
/** Connect options every worker's client gets: short bounds, so a schedule sees them. */
const OPTS = { connectTimeout: 1000, responseTimeout: 1000 }

/** Every process of a server: `pid` and its descendants (PostgreSQL runs one per session). */
function processTree(pid) {
  const out = [pid]
  for (let i = 0; i < out.length; i++) {
    try {
      for (const t of fs.readdirSync(`/proc/${out[i]}/task`)) {
        const kids = fs.readFileSync(`/proc/${out[i]}/task/${t}/children`, 'utf8').trim()
        if (kids) out.push(...kids.split(/\s+/).map(Number))
      }
    } catch { /* gone */ }
  }
  return out
}

/** A server the nemesis may pause (SIGSTOP), resume, kill -9 and start again. */
function redisServer(r, name) {
  return {
    name,
    pause: () => r.pause(),
    resume: () => r.resume(),
    kill: () => r.stop('SIGKILL'),
    start: () => r.start(),
    ensure: () => r.ensureRunning(),
  }
}

/**
 * Kills deadbolt's connections on every server that answers (`kills`, one per server) and
 * counts them: a server that is down (killed by another fault) is passed over, not the
 * others. Throws only when no server answered.
 */
async function killOnEach(kills) {
  const all = await Promise.allSettled(kills)
  const done = all.filter((r) => r.status === 'fulfilled')
  if (done.length === 0) throw all[0].reason
  return done.reduce((n, r) => n + r.value, 0)
}

/** Live keys under `prefix` in the store, read through a deadbolt client of the harness. */
async function listed(url, opts, prefix) {
  const c = await require('..').connect(url, opts)
  try {
    return (await c.list(prefix, { limit: 1000 })).map((l) => l.key)
  } finally {
    await c.close()
  }
}

const STORES = {
  memory: {
    available: () => true,
    async start() {
      const url = `memory://jepsen-${randomBytes(4).toString('hex')}`
      // One process holds every actor: memory:// is shared within a process only.
      return { url: () => url, endpoints: [], opts: {}, inProcess: true, faults: ['stall'], servers: [], leftover: async () => [], stop: async () => {} }
    },
  },
  sqlite: {
    available: () => true,
    async start() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-jepsen-sqlite-'))
      const url = `sqlite://${path.join(dir, 'locks.db')}`
      return {
        url: () => url, endpoints: [], opts: OPTS, faults: PROCESS, servers: [],
        leftover: (prefix) => listed(url, OPTS, prefix),
        stop: async () => fs.rmSync(dir, { recursive: true, force: true }),
      }
    },
  },
  redis: redisStore({ clock: false }),
  'redis-clock': redisStore({ clock: true }),
  redlock: redlockStore({ clock: false }),
  redlock5: redlockStore({ clock: false, n: 5 }),
  'redlock-clock': redlockStore({ clock: true }),
  mysql: mysqlStore({ clock: false }),
  'mysql-clock': mysqlStore({ clock: true }),
  postgres: postgresStore({ clock: false }),
  'postgres-clock': postgresStore({ clock: true }),
  sentinel: {
    available: () => ThrowawayRedis.available(),
    async start() {
      const set = await startSentinelSet({ replicas: 2 })
      // The nemesis's server is "the primary the sentinels name when the fault starts": a
      // pause or kill hits that one, and the heal resumes or restarts every server it hit.
      const paused = new Set()
      const killed = new Set()
      const primary = {
        name: 'primary',
        async pause() { const s = await set.primary(); if (!s) return null; paused.add(s); await s.pause(); return `${s.name}:${s.port}` },
        resume() { for (const s of paused) s.resume(); paused.clear() },
        async kill() { const s = await set.primary(); if (!s) return null; killed.add(s); await s.kill(); return `${s.name}:${s.port}` },
        async start() { for (const s of killed) await s.start(); killed.clear() },
        async ensure() { this.resume(); await this.start(); for (const s of set.servers) await s.ensure() },
      }
      const target = (ports) => ({ sentinels: ports.map((p) => `redis://127.0.0.1:${p}`), name: set.name })
      return {
        // Workers reach the sentinels through relays of their own, and the data servers through
        // the relays the servers announce (shared, each worker's connections faulted apart):
        // network faults hit the sentinel links and the data links.
        url: target,
        endpoints: set.sentinels.map((s) => s.port), opts: OPTS,
        dataRelays: set.servers.map((s) => s.relay),
        faults: [...PROCESS, ...NETWORK, 'store-pause', 'store-kill', 'conn-kill', 'failover', 'double-failover'],
        servers: [primary],
        killConnections: async () => { const p = await set.primaryPort(); return p ? killClients(p) : 0 },
        healthy: () => set.healthy(),
        nemesis: {
          /** `SENTINEL FAILOVER`; ends once the sentinels name another primary. */
          async failover(f, rec) {
            const before = await set.primaryPort()
            rec.from = before
            await set.failover()
            await until(async () => (await set.primaryPort()) !== before, 20000, 'the sentinels to promote a replica')
            rec.to = await set.primaryPort()
          },
          /**
           * Issue 46's schedule: `SENTINEL FAILOVER` to replica B, with replica C unable to
           * follow B (a wrong `masterauth`) and the old primary never promoted again
           * (`replica-priority 0`); then B SIGSTOPped until the sentinels promote C, which
           * missed every grant and counter lift made on B. `healthy()` undoes the settings.
           */
          async 'double-failover'(f, rec) {
            const a = await set.primary()
            const [b, c] = set.servers.filter((s) => s !== a).sort((x, y) => ((x.port + f.target) % 7) - ((y.port + f.target) % 7))
            rec.from = a.relay.port
            await ask(a.port, 'CONFIG', 'SET', 'replica-priority', '0')
            await ask(b.port, 'CONFIG', 'SET', 'replica-priority', '10')
            await ask(c.port, 'CONFIG', 'SET', 'replica-priority', '200')
            await ask(c.port, 'CONFIG', 'SET', 'masterauth', 'not-the-password')
            await set.failover()
            await until(async () => (await set.primaryPort()) === b.relay.port, 20000, 'B to be promoted')
            await until(async () => Number((await info(c.port, 'replication')).master_port) === b.relay.port, 20000, 'C to be told to follow B')
            // The old primary follows B by hand, as the torture scenario does (the sentinels
            // would seconds later): a primary the sentinels still wait to demote holds back
            // the second failover.
            await ask(a.port, 'REPLICAOF', '127.0.0.1', String(b.relay.port))
            await sleep(f.ms)
            rec.to = b.relay.port
            await b.pause()
            try {
              await until(async () => (await set.primaryPort()) === c.relay.port, 45000, 'C to be promoted')
            } finally { b.resume() }
            rec.then = c.relay.port
          },
        },
        leftover: (prefix) => listed(target(set.sentinels.map((s) => s.port)), OPTS, prefix),
        stop: () => set.stop(),
      }
    },
  },
  cluster: {
    available: () => ThrowawayRedis.available(),
    async start() {
      const c = await startCluster({ primaries: 3, replicas: 1 })
      const target = { cluster: c.urls }
      return {
        // Cluster clients reach every node at the address it announces: its relay (shared,
        // each worker's connections faulted apart), seeds included.
        url: () => target,
        endpoints: [], opts: OPTS,
        dataRelays: c.servers.map((s) => s.relay),
        faults: [...PROCESS, ...NETWORK, 'store-pause', 'store-kill', 'conn-kill', 'failover'],
        servers: c.servers,
        killConnections: () => killOnEach(c.servers.map((s) => killClients(s.port))),
        healthy: () => c.healthy(),
        nemesis: {
          /** `CLUSTER FAILOVER` on a replica of a primary; ends once the replica is primary. */
          async failover(f, rec) {
            const r = await c.failover(f.target)
            if (!r) { rec.skipped = 'no replica linked'; return }
            Object.assign(rec, r)
            await until(async () => (await info(r.to, 'replication')).role === 'master', 20000, 'the replica to be promoted')
          },
        },
        leftover: (prefix) => listed(target, OPTS, prefix),
        stop: () => c.stop(),
      }
    },
  },
  etcd: etcdStore(1),
  etcd3: etcdStore(3),
  dynamodb: {
    available: () => dynaliteInstalled(),
    async start() {
      const d = await startDynalite()
      let watcher = null
      const table = `jepsen_${randomBytes(3).toString('hex')}`
      const opts = { ...OPTS, createTable: true, credentials: TEST_CREDENTIALS }
      const url = (p) => `dynamodb://${table}?region=us-east-1&endpoint=http://127.0.0.1:${p}`
      return {
        url: ([p]) => url(p),
        endpoints: [d.port], opts,
        // dynalite keeps its tables in memory: a kill is a new, empty store, not a restart.
        faults: [...PROCESS, ...NETWORK, 'store-pause'],
        servers: [{ name: 'dynalite', pause: () => stopProcess(d.pid), resume: () => { try { process.kill(d.pid, 'SIGCONT') } catch {} }, kill: async () => {}, start: async () => {}, ensure: async () => { try { process.kill(d.pid, 'SIGCONT') } catch {} } }],
        // A lease nobody released (a killed holder's, a job's kept for atLeastFor) stays in
        // the table until a contender has watched its version stand still for a lease
        // (docs/stores/dynamodb.md): `list` shows it, and only a client that keeps watching
        // sees it free. One watching client reads what is left, by `inspect`.
        leftover: async (prefix) => {
          watcher ??= await require('..').connect(url(d.port), opts)
          const live = []
          for (const l of await watcher.list(prefix, { limit: 1000 })) if ((await watcher.inspect(l.key)) !== null) live.push(l.key)
          return live
        },
        stop: async () => { if (watcher) await watcher.close().catch(() => {}); await d.stop() },
      }
    },
  },
}

/**
 * `env` with the `clock-jump` fault on the server `shim` runs (named `server`): its wall
 * clock jumps forward by the fault's `jump` ms and stays there. `env` itself when there is no
 * shim (the plain configuration).
 */
function withClockJumps(env, shim, server) {
  if (!shim) return env
  const jump = async (f, rec) => {
    shim.jump(f.jump)
    Object.assign(rec, { server, jump: f.jump, offset: shim.offsetMs })
  }
  return {
    ...env,
    faults: [...env.faults, 'clock-jump'],
    nemesis: { ...env.nemesis, 'clock-jump': jump },
    stop: async () => { await env.stop(); shim.destroy() },
  }
}

/**
 * One Redis server with AOF (fsync always): tokens survive a kill -9 (without it a restart
 * starts a new token epoch, as documented). With `clock`, the server runs under the clock
 * shim and the nemesis may jump its clock forward (`clock-jump`); a configuration of its
 * own, so that the plain one's seeds replay as before.
 */
function redisStore({ clock }) {
  return {
    available: () => ThrowawayRedis.available() && (!clock || clockShimLib() !== null),
    async start() {
      const shim = clock ? new ClockShim() : null
      const r = await ThrowawayRedis.create({ aof: true, env: shim?.env() ?? null })
      const raw = rawOf('redis')(r.url)
      return withClockJumps({
        url: ([p]) => `redis://127.0.0.1:${p}`,
        endpoints: [r.port], opts: OPTS,
        faults: [...PROCESS, ...NETWORK, 'store-pause', 'store-kill', 'conn-kill'],
        servers: [redisServer(r, 'redis')],
        killConnections: () => raw.killConnections(),
        leftover: async (prefix) => (await raw.leftover(prefix)).extra,
        stop: async () => { await raw.close(); await r.destroy() },
      }, shim, 'redis')
    },
  }
}

/**
 * Redlock over `n` Redis servers with AOF (3, or 5: a semaphore of 2 permits then needs 4 of
 * them, not all). With `clock`, the first server runs under the clock shim and every
 * `clock-jump` moves its clock: a minority whose clock jumps, which the quorum must absorb
 * (two servers jumping within a lease break Redlock's assumption, documented).
 */
function redlockStore({ clock, n = 3 }) {
  return {
    available: () => ThrowawayRedis.available() && (!clock || clockShimLib() !== null),
    async start() {
      const shim = clock ? new ClockShim() : null
      const rs = []
      for (let i = 0; i < n; i++) rs.push(await ThrowawayRedis.create({ aof: true, env: i === 0 ? shim?.env() ?? null : null }))
      const raws = rs.map((r) => rawOf('redis')(r.url))
      const names = rs.map((_, i) => `redis${i}`)
      return withClockJumps({
        url: (ports) => ports.map((p) => `redis://127.0.0.1:${p}`),
        endpoints: rs.map((r) => r.port), opts: OPTS,
        // A permit grant's token is the largest its quorum drew (docs/design.md, Redlock):
        // two holders granted at once by different quorums may share it.
        sharedPermitTokens: true,
        faults: [...PROCESS, ...NETWORK, 'store-pause', 'store-kill', 'conn-kill'],
        servers: rs.map((r, i) => redisServer(r, names[i])),
        killConnections: () => killOnEach(raws.map((x) => x.killConnections())),
        leftover: async (prefix) => (await Promise.all(raws.map((x) => x.leftover(prefix)))).flatMap((x) => x.extra),
        stop: async () => { for (const x of raws) await x.close(); for (const r of rs) await r.destroy() },
      }, shim, names[0])
    },
  }
}

/**
 * MariaDB (its leases expire by `UTC_TIMESTAMP(6)`, the server's wall clock). With `clock`,
 * the server runs under the clock shim and the nemesis may jump its clock forward.
 */
function mysqlStore({ clock }) {
  return {
    available: () => ThrowawayMysql.available() && (!clock || clockShimLib() !== null),
    async start() {
      const shim = clock ? new ClockShim() : null
      const m = await ThrowawayMysql.create({ env: shim?.env() ?? null })
      const raw = rawOf('mysql')(m.url)
      const u = new URL(m.url)
      return withClockJumps({
        url: ([p]) => { u.port = String(p); return u.toString() },
        endpoints: [m.port], opts: OPTS,
        faults: [...PROCESS, ...NETWORK, 'store-pause', 'store-kill', 'conn-kill'],
        servers: [{ name: 'mariadb', pause: () => m.pause(), resume: () => m.resume(), kill: () => m.stop('SIGKILL'), start: () => m.db.start({ timeout: 60000 }), ensure: () => m.ensureRunning() }],
        killConnections: () => raw.killConnections(),
        leftover: async (prefix) => (await raw.leftover(prefix)).extra,
        stop: async () => { await raw.close(); await m.destroy() },
      }, shim, 'mariadb')
    },
  }
}

/**
 * PostgreSQL (its leases expire by `clock_timestamp()`, the server's wall clock). With
 * `clock`, the server runs under the clock shim and the nemesis may jump its clock forward
 * (`clock-jump`); a configuration of its own, so that the plain one's seeds replay as before.
 */
function postgresStore({ clock }) {
  return {
    available: () => { try { return require('../__test__/fixtures/postgres').binDir() !== null && (!clock || clockShimLib() !== null) } catch { return false } },
    async start() {
      const pg = await ThrowawayPostgres.create({ port: 5600 + Math.floor(Math.random() * 300) })
      const shim = clock ? new ClockShim() : null
      if (shim) {
        // Every start (the first, and after a kill) under the shim: pg_ctl passes its
        // environment to the postmaster, which passes it to every backend it forks (and
        // each backend inherits the postmaster's mapping of the offset file).
        const run = pg.run.bind(pg)
        pg.run = (program, args) => {
          if (program !== 'pg_ctl' || args[0] !== 'start') return run(program, args)
          const saved = {}
          const env = shim.env()
          for (const k of Object.keys(env)) { saved[k] = process.env[k]; process.env[k] = env[k] }
          try { return run(program, args) } finally { for (const k of Object.keys(env)) { if (saved[k] === undefined) delete process.env[k]; else process.env[k] = saved[k] } }
        }
      }
      await pg.start()
      const pid = () => { try { return Number(fs.readFileSync(path.join(pg.datadir, 'postmaster.pid'), 'utf8').split('\n')[0]) } catch { return null } }
      let paused = []
      const url = (p) => `postgres://postgres@127.0.0.1:${p}/postgres`
      const { Client } = require('pg')
      return withClockJumps({
        url: ([p]) => url(p),
        endpoints: [pg.port], opts: OPTS,
        faults: [...PROCESS, ...NETWORK, 'store-pause', 'store-kill', 'conn-kill'],
        servers: [{
          name: 'postgres',
          async pause() { const p = pid(); if (p) { paused = processTree(p); for (const q of paused) await stopProcess(q).catch(() => {}) } },
          resume() { for (const q of paused) { try { process.kill(q, 'SIGCONT') } catch {} } paused = [] },
          async kill() { this.resume(); await pg.stop('immediate') },
          start: () => pg.start(),
          async ensure() { this.resume(); await pg.start().catch(() => {}) },
        }],
        async killConnections() {
          const c = new Client({ connectionString: url(pg.port) })
          await c.connect()
          try {
            const r = await c.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'")
            return r.rowCount
          } finally { await c.end() }
        },
        leftover: (prefix) => listed(url(pg.port), OPTS, prefix),
        async stop() { await pg.destroy() },
      }, shim, 'postgres')
    },
  }
}

function etcdStore(members) {
  return {
    available: () => etcdInstalled(),
    async start() {
      const c = await startEtcd({ members })
      const servers = c.members.map((m) => ({
        name: m.name,
        member: m,
        pause: () => stopProcess(m.pid),
        resume: () => m.resume(),
        kill: () => m.kill(),
        start: async () => { m.restart(); await c.leader() },
        async ensure() { try { m.resume() } catch {} },
      }))
      const faults = [...PROCESS, ...NETWORK, 'store-pause', 'store-kill']
      if (members >= 3) faults.push('leader-pause', 'leader-kill', 'minority-pause')
      return {
        url: (ports) => `etcd://${ports.map((p) => `127.0.0.1:${p}`).join(',')}`,
        endpoints: c.members.map((m) => m.clientPort),
        opts: { ...OPTS, ttl: 2000 },
        faults,
        servers,
        /** The member serving as leader now (null when none answers). */
        async leader() {
          for (const s of servers) if (await s.member.isLeader().catch(() => false)) return s
          return null
        },
        leftover: (prefix) => listed(c.url(), OPTS, prefix),
        stop: () => c.stop(),
        ttl: 2000,
        // "each member in turn, within the bound"
        boundFactor: members,
      }
    },
  }
}

module.exports = { STORES, OPTS, processTree }
