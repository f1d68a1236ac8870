'use strict'
// The harness's own loopback TCP relay, one per worker and store endpoint, that the nemesis
// turns faulty: added latency (both ways, order kept), replies held back (delivered at heal),
// requests dropped, a blackhole (nothing either way), connection resets. Bytes a relay
// discards leave the connection's protocol stream torn, so heal() resets such connections,
// as a peer would after a timeout. (torture/proxy.js freezes only; this one does the rest.)

const fs = require('node:fs')
const net = require('node:net')

const cleanMode = () => ({ latency: 0, hold: false, drop: false, blackhole: false })

/**
 * A loopback relay to `target()`'s port. `modeOf(client)` is called once per accepted
 * connection and returns the mode object (latency, hold, drop, blackhole) its bytes obey, and
 * the tag the connection is filed under. Resolves { server, conns, port }.
 */
async function relay(target, modeOf) {
  const conns = new Set()
  const server = net.createServer((client) => {
    const upstream = net.connect(target(), '127.0.0.1')
    const { mode, tag } = modeOf(client)
    const conn = { client, upstream, tag, mode, torn: false, held: [], queue: [], timer: null }
    conns.add(conn)
    const flush = () => {
      conn.timer = null
      const t = Date.now()
      while (conn.queue.length > 0 && conn.queue[0].at <= t) {
        const { to, d } = conn.queue.shift()
        if (!to.destroyed) to.write(d)
      }
      if (conn.queue.length > 0) conn.timer = setTimeout(flush, conn.queue[0].at - t)
    }
    const forward = (to, up) => (d) => {
      const { mode } = conn
      if (mode.blackhole || (up && mode.drop)) { conn.torn = true; return }
      if (!up && mode.hold) { conn.held.push({ to, d }); return }
      if (mode.latency === 0 && conn.queue.length === 0) { to.write(d); return }
      conn.queue.push({ to, d, at: Date.now() + mode.latency })
      if (conn.timer === null) conn.timer = setTimeout(flush, Math.max(0, conn.queue[0].at - Date.now()))
    }
    client.on('data', forward(upstream, true))
    upstream.on('data', forward(client, false))
    const done = () => {
      if (conn.timer !== null) clearTimeout(conn.timer)
      client.destroy()
      upstream.destroy()
      conns.delete(conn)
    }
    client.on('error', done).on('close', done)
    upstream.on('error', done).on('close', done)
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { server, conns, port: server.address().port }
}

/** `base` with the controls of a relay's connections `of()` (all, or one worker's), on `mode`. */
function controls(base, mode, of) {
  return Object.defineProperties(base, Object.getOwnPropertyDescriptors({
    mode,
    get connections() { return of().length },
    /** Chunks of the server's replies held back now (`holdReplies`). */
    get heldChunks() { return of().reduce((n, c) => n + c.held.length, 0) },
    /** Every chunk, either way, is delivered `ms` later than it arrived. */
    latency(ms) { mode.latency = ms },
    /** The server's replies are held back until heal (requests still go through). */
    holdReplies() { mode.hold = true },
    /** Requests are discarded (replies to earlier ones still come back). */
    dropRequests() { mode.drop = true },
    /** Nothing is forwarded either way, and nothing is closed. */
    blackhole() { mode.blackhole = true },
    /** Resets every relayed connection now (new ones are accepted). */
    reset() {
      for (const c of of()) { c.client.resetAndDestroy?.() ?? c.client.destroy(); c.upstream.destroy() }
    },
    /** Back to a clean relay: held replies delivered, torn connections reset. */
    heal() {
      mode.latency = 0
      mode.hold = false
      mode.drop = false
      mode.blackhole = false
      for (const c of of()) {
        if (c.torn) { c.client.destroy(); c.upstream.destroy(); continue }
        for (const { to, d } of c.held.splice(0)) if (!to.destroyed) to.write(d)
      }
    },
  }))
}

function closeRelay({ server, conns }) {
  for (const c of conns) { c.client.destroy(); c.upstream.destroy() }
  conns.clear()
  return new Promise((resolve) => server.close(() => resolve()))
}

/** A relay of one worker to the server on `targetPort`: every connection is that worker's. */
async function faultyProxy(targetPort) {
  const mode = cleanMode()
  const r = await relay(() => targetPort, () => ({ mode, tag: null }))
  return controls({ port: r.port, close: () => closeRelay(r) }, mode, () => [...r.conns])
}

/**
 * The inode of the socket whose local end is 127.0.0.1:`localPort` and remote end
 * 127.0.0.1:`remotePort` (/proc/net/tcp), or null.
 */
function socketInode(localPort, remotePort) {
  const hex = (n) => `0100007F:${n.toString(16).toUpperCase().padStart(4, '0')}`
  const [l, r] = [hex(localPort), hex(remotePort)]
  for (const line of fs.readFileSync('/proc/net/tcp', 'utf8').split('\n')) {
    const f = line.trim().split(/\s+/)
    if (f[1] === l && f[2] === r) return f[9]
  }
  return null
}

/** Whether process `pid` has the socket `inode` open. */
function owns(pid, inode) {
  try {
    for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
      try { if (fs.readlinkSync(`/proc/${pid}/fd/${fd}`) === `socket:[${inode}]`) return true } catch { /* closed */ }
    }
  } catch { /* gone */ }
  return false
}

/**
 * The relay in front of one data server of a topology (a Sentinel set's, a Cluster's), which
 * the server announces as its address, so every client and every other server reaches it
 * through here. One relay serves every worker: a connection is filed under the worker
 * process that opened it (found by its socket in /proc), and `view(i, pid)` gives worker
 * slot `i` the controls of a per-worker relay over its own connections only. Connections of
 * other processes (the servers' replication, the sentinels, the harness) are never faulted.
 * `target` is set once the server's port is known (the server is started announcing
 * `port`). `accepted[i]`: connections of slot `i` since its view was made.
 */
async function dataRelay() {
  const slots = new Map() // slot → { mode, pid() }
  const accepted = new Map()
  const d = {
    target: 0,
    accepted,
    /** Controls of worker slot `i`'s connections (`pid()`: its process now); clean. */
    view(i, pid) {
      const mode = cleanMode()
      slots.set(i, { mode, pid })
      accepted.set(i, 0)
      return controls({ port: d.port, close: async () => {} }, mode, () => [...r.conns].filter((c) => c.tag === i))
    },
    close: () => closeRelay(r),
  }
  const r = await relay(() => d.target, (client) => {
    const inode = socketInode(client.remotePort, client.localPort)
    if (inode !== null) {
      for (const [i, s] of slots) {
        if (owns(s.pid(), inode)) { accepted.set(i, accepted.get(i) + 1); return { mode: s.mode, tag: i } }
      }
    }
    return { mode: cleanMode(), tag: null }
  })
  d.port = r.port
  return d
}

module.exports = { faultyProxy, dataRelay }
