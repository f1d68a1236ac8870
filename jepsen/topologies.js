'use strict'
// The Redis topologies of the fault harness, started privately on free loopback ports: a
// Sentinel set (a primary, replicas, 3 sentinels) and a Redis Cluster (3 primaries, each with
// a replica). Every data server is a `ThrowawayRedis` (torture/servers.js) with AOF (fsync
// always), so the nemesis can pause it, kill it and start it again on its port and data.
// Both are started once per batch; `healthy()` waits, observably, until the topology is whole
// again after a schedule's faults (every server up, every replica linked to its primary, the
// sentinels or the cluster agreeing), so that each schedule starts from a healthy one.

const fs = require('node:fs')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')
const { spawn } = require('node:child_process')
const Redis = require('ioredis')
const { ThrowawayRedis, freePort, answers, sleep, writeSentinelConf } = require('../torture/servers')
const { dataRelay } = require('./proxy')

const sentinelProcs = new Set()
process.on('exit', () => { for (const p of sentinelProcs) { try { p.kill('SIGKILL') } catch {} } })

/** A short-lived ioredis client of `port` that never retries (one command, then gone). */
async function ask(port, ...cmd) {
  const c = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1000, commandTimeout: 2000, enableOfflineQueue: false })
  c.on('error', () => {})
  try {
    await c.connect()
    return await c.call(...cmd)
  } finally {
    c.disconnect()
  }
}

/** INFO `section` of the server on `port` as an object. */
async function info(port, section) {
  const out = {}
  for (const l of String(await ask(port, 'INFO', section)).split('\r\n')) {
    const i = l.indexOf(':')
    if (i > 0) out[l.slice(0, i)] = l.slice(i + 1)
  }
  return out
}

/** Polls `fn` (errors count as false) until it is true; throws after `ms` naming `what`. */
async function until(fn, ms, what, every = 100, why = null) {
  const end = Date.now() + ms
  let last = null
  for (;;) {
    try { if (await fn()) return } catch (err) { last = err }
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? ` (${last.message})` : ''}${why ? `: ${JSON.stringify(await why().catch((e) => e.message))}` : ''}`)
    await sleep(every)
  }
}

/**
 * The nemesis's view of one data server (pause, resume, kill -9, start again); `relay`: the
 * relay it announces as its address (`relay.port`), which the network nemesis turns faulty.
 */
function handle(r, name, relay) {
  return {
    name,
    redis: r,
    relay,
    get port() { return r.port },
    pause: () => r.pause(),
    resume: () => r.resume(),
    kill: () => r.stop('SIGKILL'),
    start: () => r.start(),
    ensure: () => r.ensureRunning(),
  }
}

/** Cuts deadbolt's connections to the server on `port` (normal and pub/sub clients). */
async function killClients(port) {
  const a = await ask(port, 'CLIENT', 'KILL', 'TYPE', 'normal').catch(() => 0)
  const b = await ask(port, 'CLIENT', 'KILL', 'TYPE', 'pubsub').catch(() => 0)
  return Number(a) + Number(b)
}

// ─────────────────────────────────────── Sentinel ───────────────────────────────────────

/**
 * A primary with `replicas` replicas and 3 sentinels monitoring it as "mymaster" (quorum 2,
 * down after 1 s, failover timeout 3 s). Replicas follow by `REPLICAOF` at run time (not on
 * the command line), so that a server started again after a kill comes up as a primary of
 * its own data and the sentinels turn it into a replica of theirs, as in production.
 */
async function startSentinelSet({ replicas = 2, env = null } = {}) {
  // Every data server announces its relay (`replica-announce-port`) and the sentinels monitor
  // the primary at its relay: the address they name, the replicas they learn and the one
  // they tell replicas to follow are relays, so clients, replication and sentinel pings all
  // go through them (only workers' connections are ever faulted: proxy.js dataRelay).
  const servers = []
  for (let i = 0; i <= replicas; i++) {
    const relay = await dataRelay()
    const r = await ThrowawayRedis.create({ aof: true, env, extra: ['--replica-announce-ip', '127.0.0.1', '--replica-announce-port', String(relay.port)] })
    relay.target = r.port
    servers.push(handle(r, `redis${i}`, relay))
  }
  for (const s of servers.slice(1)) await ask(s.port, 'REPLICAOF', '127.0.0.1', String(servers[0].relay.port))
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-jepsen-sentinel-'))
  const sentinels = []
  for (let i = 0; i < 3; i++) {
    const port = await freePort()
    const conf = writeSentinelConf(dir, port, servers[0].relay.port)
    const proc = spawn('redis-server', [conf, '--sentinel'], { stdio: 'ignore' })
    sentinelProcs.add(proc)
    proc.once('exit', () => sentinelProcs.delete(proc))
    await until(() => answers(port), 5000, `sentinel on ${port}`, 25)
    sentinels.push({ port, proc })
  }
  const set = {
    name: 'mymaster',
    servers,
    sentinels,
    /** The port (a relay's) the sentinels name as the primary (asked of each in turn), or null. */
    async primaryPort() {
      for (const s of sentinels) {
        const r = await ask(s.port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', 'mymaster').catch(() => null)
        if (r) return Number(r[1])
      }
      return null
    },
    /** The data server the sentinels name as the primary, or null. */
    async primary() {
      const p = await this.primaryPort()
      return servers.find((s) => s.relay.port === p) ?? null
    },
    /** `SENTINEL FAILOVER` (asked of each sentinel until one accepts). */
    async failover() {
      let last
      for (const s of sentinels) {
        try { return await ask(s.port, 'SENTINEL', 'FAILOVER', 'mymaster') } catch (err) { last = err }
      }
      throw last
    },
    /**
     * Resolves once the topology is whole: every server up, the 3 sentinels naming one
     * primary, that primary a primary, every other server its replica with the link up, and
     * every sentinel counting every replica as such (none down). Undoes what the double
     * failover set (replica priorities, a wrong `masterauth`) first.
     */
    async healthy(ms = 90000) {
      for (const s of servers) await s.ensure()
      for (const s of servers) {
        await ask(s.port, 'CONFIG', 'SET', 'masterauth', '').catch(() => {})
        await ask(s.port, 'CONFIG', 'SET', 'replica-priority', '100').catch(() => {})
      }
      await until(async () => {
        const named = await Promise.all(sentinels.map((s) => ask(s.port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', 'mymaster')))
        const p = Number(named[0][1])
        if (!named.every((n) => Number(n[1]) === p)) return false
        if ((await info(p, 'replication')).role !== 'master') return false
        for (const s of servers) {
          if (s.relay.port === p) continue
          const r = await info(s.port, 'replication')
          if (r.role !== 'slave' || Number(r.master_port) !== p || r.master_link_status !== 'up') return false
        }
        for (const s of sentinels) {
          const m = await ask(s.port, 'SENTINEL', 'MASTER', 'mymaster')
          const fields = Object.fromEntries(m.reduce((a, x, i) => (i % 2 ? a : [...a, [x, m[i + 1]]]), []))
          if (Number(fields['num-slaves']) !== replicas || fields.flags !== 'master') return false
          const rs = await ask(s.port, 'SENTINEL', 'REPLICAS', 'mymaster')
          for (const r of rs) {
            const f = Object.fromEntries(r.reduce((a, x, i) => (i % 2 ? a : [...a, [x, r[i + 1]]]), []))
            if (f.flags !== 'slave') return false
          }
        }
        return true
      }, ms, 'the Sentinel set to be whole again', 200)
    },
    async stop() {
      for (const s of sentinels) s.proc.kill('SIGKILL')
      for (const s of servers) { await s.redis.destroy(); await s.relay.close() }
      fs.rmSync(dir, { recursive: true, force: true })
    },
  }
  await set.healthy(60000)
  return set
}

// ─────────────────────────────────────── Cluster ───────────────────────────────────────

/** A free port whose cluster bus port (+10 000) is free too. */
async function clusterPort() {
  for (;;) {
    const port = await freePort()
    if (port < 55000 && (await new Promise((resolve) => {
      const srv = net.createServer()
      srv.once('error', () => resolve(false))
      srv.listen(port + 10000, '127.0.0.1', () => srv.close(() => resolve(true)))
    }))) return port
  }
}

/** `CLUSTER NODES` of the node on `port`, parsed. */
async function clusterNodes(port) {
  return String(await ask(port, 'CLUSTER', 'NODES')).trim().split('\n').map((l) => {
    const f = l.split(' ')
    return { id: f[0], port: Number(f[1].split('@')[0].split(':')[1]), flags: f[2].split(','), master: f[3], link: f[7], slots: f.slice(8).filter((x) => /^\d/.test(x)) }
  })
}

/**
 * A Redis Cluster of 3 primaries, each with a replica (`redis-cli --cluster create`), node
 * timeout 1.5 s: a primary paused or killed for longer is replaced by its replica.
 */
async function startCluster({ primaries = 3, replicas = 1, nodeTimeout = 1500, env = null } = {}) {
  // Every node announces its relay as its client port (`cluster-announce-port`): the slot map
  // and the replicas' primaries are relays, so clients and replication go through them (only
  // workers' connections are ever faulted). The cluster bus stays direct (its own port).
  const servers = []
  for (let i = 0; i < primaries * (1 + replicas); i++) {
    const relay = await dataRelay()
    const r = await ThrowawayRedis.create({ aof: true, env, port: clusterPort, extra: (x) => ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', String(nodeTimeout), '--cluster-announce-ip', '127.0.0.1', '--cluster-announce-port', String(relay.port), '--cluster-announce-bus-port', String(x.port + 10000)] })
    relay.target = r.port
    servers.push(handle(r, `node${i}`, relay))
  }
  const { execFile } = require('node:child_process')
  await new Promise((resolve, reject) => execFile('redis-cli', ['--cluster', 'create', ...servers.map((s) => `127.0.0.1:${s.port}`), '--cluster-replicas', String(replicas), '--cluster-yes'], { encoding: 'utf8' }, (err, out, errOut) => (err ? reject(new Error(`redis-cli --cluster create: ${errOut || err.message}`)) : resolve(out))))
  const cluster = {
    servers,
    urls: servers.map((s) => `redis://127.0.0.1:${s.relay.port}`),
    /** The node on `port`'s view: primaries with slots, each with its replicas. */
    nodes: (port) => clusterNodes(port),
    /**
     * Resolves once every node is up and says cluster_state:ok, every node agrees on which
     * nodes are primaries with slots (all 16 384 covered by `primaries` of them), none is
     * flagged failing, and every replica's link to its primary is up.
     */
    async healthy(ms = 90000) {
      for (const s of servers) await s.ensure()
      await until(async () => {
        const views = await Promise.all(servers.map((s) => clusterNodes(s.port)))
        const sig = (v) => v.filter((n) => n.flags.includes('master') && n.slots.length).map((n) => n.id).sort().join()
        const first = sig(views[0])
        if (first.split(',').length !== primaries) return false
        for (const v of views) {
          if (sig(v) !== first) return false
          if (v.some((n) => n.flags.some((f) => f === 'fail' || f === 'fail?' || f === 'handshake' || f === 'noaddr') || n.link !== 'connected')) return false
        }
        for (const s of servers) {
          if (!/^cluster_state:ok/m.test(String(await ask(s.port, 'CLUSTER', 'INFO')))) return false
          const r = await info(s.port, 'replication')
          if (r.role === 'slave' && r.master_link_status !== 'up') return false
        }
        return true
      }, ms, 'the cluster to be whole again', 200, () => Promise.all(servers.map((s) => clusterNodes(s.port).catch((e) => e.message))))
    },
    /** `CLUSTER FAILOVER` on a replica of the primary `target` picks (modulo); its port pair. */
    async failover(target) {
      const view = await clusterNodes(servers[0].port)
      const prim = view.filter((n) => n.flags.includes('master') && n.slots.length).sort((a, b) => a.port - b.port)
      const p = prim[target % prim.length]
      const replica = view.find((n) => n.flags.includes('slave') && n.master === p.id && !n.flags.includes('fail'))
      if (!replica) return null
      await ask(replica.port, 'CLUSTER', 'FAILOVER')
      return { from: p.port, to: replica.port }
    },
    async stop() { for (const s of servers) { await s.redis.destroy(); await s.relay.close() } },
  }
  await cluster.healthy(60000)
  return cluster
}

module.exports = { startSentinelSet, startCluster, ask, info, until, killClients }
