'use strict'
// A loopback TCP relay that can freeze: stop forwarding in both directions without closing
// anything, as a network partition does (the bytes are held back, not dropped, and delivered
// on thaw, like TCP retransmissions after the partition heals). Freezing is per connection
// or for all connections, current and future.

const net = require('node:net')

async function freezableProxy(targetPort, targetHost = '127.0.0.1') {
  const conns = new Set()
  let frozenAll = false
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, targetHost)
    const conn = { client, upstream, frozen: frozenAll, held: [] }
    conns.add(conn)
    const forward = (to) => (d) => {
      if (conn.frozen) conn.held.push([to, d])
      else to.write(d)
    }
    client.on('data', forward(upstream))
    upstream.on('data', forward(client))
    const done = () => {
      client.destroy()
      upstream.destroy()
      conns.delete(conn)
    }
    client.on('error', done).on('close', done)
    upstream.on('error', done).on('close', done)
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    port: server.address().port,
    get connections() { return conns.size },
    /** Stops forwarding on every connection, and on connections opened later. */
    freeze() {
      frozenAll = true
      for (const c of conns) c.frozen = true
    },
    /** Freezes only the connection opened n-th among those still open (0-based). */
    freezeOne(n = 0) {
      const c = [...conns][n]
      if (c) c.frozen = true
      return c !== undefined
    },
    /** Forwards again, first what was held back. */
    thaw() {
      frozenAll = false
      for (const c of conns) {
        c.frozen = false
        for (const [to, d] of c.held.splice(0)) if (!to.destroyed) to.write(d)
      }
    },
    /** Cuts every relayed connection and stops listening. */
    close() {
      for (const c of conns) { c.client.destroy(); c.upstream.destroy() }
      conns.clear()
      return new Promise((resolve) => server.close(() => resolve()))
    },
  }
}

module.exports = { freezableProxy }
