'use strict'
// The harness's own loopback TCP relay, one per worker and store endpoint, that the nemesis
// turns faulty: added latency (both ways, order kept), replies held back (delivered at heal),
// requests dropped, a blackhole (nothing either way), connection resets. Bytes a relay
// discards leave the connection's protocol stream torn, so heal() resets such connections,
// as a peer would after a timeout. (torture/proxy.js freezes only; this one does the rest.)

const net = require('node:net')

async function faultyProxy(targetPort, targetHost = '127.0.0.1') {
  const conns = new Set()
  const mode = { latency: 0, hold: false, drop: false, blackhole: false }
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, targetHost)
    const conn = { client, upstream, torn: false, held: [], queue: [], timer: null }
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
  const proxy = {
    port: server.address().port,
    mode,
    get connections() { return conns.size },
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
      for (const c of conns) { c.client.resetAndDestroy?.() ?? c.client.destroy(); c.upstream.destroy() }
    },
    /** Back to a clean relay: held replies delivered, torn connections reset. */
    heal() {
      mode.latency = 0
      mode.hold = false
      mode.drop = false
      mode.blackhole = false
      for (const c of conns) {
        if (c.torn) { c.client.destroy(); c.upstream.destroy(); continue }
        for (const { to, d } of c.held.splice(0)) if (!to.destroyed) to.write(d)
      }
    },
    close() {
      for (const c of conns) { c.client.destroy(); c.upstream.destroy() }
      conns.clear()
      return new Promise((resolve) => server.close(() => resolve()))
    },
  }
  return proxy
}

module.exports = { faultyProxy }
