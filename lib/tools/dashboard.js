'use strict'
// `deadbolt dashboard`: the live view of `top` as a web page, served by node:http with no build
// step. One loop reads a frame from the store every interval and pushes it to every open page
// through Server-Sent Events, with a history of what this process saw (holds, grants,
// expiries) for the chart. Read-only unless `allowRelease`.
//
// Who may look: on loopback (the address the server is bound to, not the --host text), pages
// whose Host header names this server (a page of another site cannot reach it by DNS
// rebinding); on any other address, only requests carrying the token printed at start. Who may
// release: a POST with the token in a header, which the served page has and a page of another
// origin can neither read nor send without a CORS preflight this server never grants. On
// loopback the page itself carries the token: any local user who can open the port can release
// (docs/operations.md says so).
//
// A page that stops reading its event stream is dropped once more than MAX_QUEUED (or three
// frames, when a frame is larger) wait for it: memory per page is bounded.

const http = require('http')
const net = require('net')
const fs = require('fs')
const path = require('path')
const { randomBytes, timingSafeEqual } = require('crypto')
const { Sightings, readFrame } = require('./view')
const { holderText } = require('../identity')
const { visible, jsonLine } = require('./printable')

const PAGE = path.join(__dirname, 'dashboard.html')
/** Samples the chart keeps: ten minutes at the default interval. */
const HISTORY = 600
const MAX_BODY = 64 * 1024
/** Bytes of frames that may wait for a page that does not read before it is dropped. */
const MAX_QUEUED = 4 * 1024 * 1024

/**
 * Whether `address`, the address the server is bound to (never the --host text: a name such
 * as `127.example.com` or `localhost` may resolve anywhere), is a loopback address:
 * 127.0.0.0/8, ::1, or 127.0.0.0/8 mapped into IPv6.
 */
function isLoopback(address) {
  // The system writes a bound address in its shortest form (inet_ntop): ::1, ::ffff:127.0.0.1.
  const v4 = address.replace(/^::ffff:/i, '')
  return address === '::1' || (net.isIPv4(v4) && v4.startsWith('127.'))
}

/**
 * `value` as JSON that is also safe inside an HTML <script> element: `<` (no `</script>` or
 * `<!--` can end or change it), `>`, `&` and U+2028/2029 written as \uXXXX escapes.
 */
function scriptJson(value) {
  return JSON.stringify(value).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

/** A Host header (`name:port`) as a URL writes it, or null if it is none. */
function hostOf(header) {
  try {
    return new URL(`http://${header}`).host
  } catch {
    return null
  }
}

function sameToken(given, token) {
  if (typeof given !== 'string') return false
  const a = Buffer.from(given)
  const b = Buffer.from(token)
  return a.length === b.length && timingSafeEqual(a, b)
}

/**
 * What changed between two frames' locks, as this process saw it: holders that appeared
 * (grants), and holders that vanished before their lease would have ended (released) or after
 * (expired: lost or abandoned by their holder).
 */
class History {
  constructor(limit = HISTORY) {
    this.limit = limit
    this.samples = []
    this.last = null
  }

  add(frame) {
    const now = new Map(frame.locks.map((l) => [`${l.key}\u0000${l.owner}\u0000${l.fencingToken}`, l]))
    const sample = { t: frame.at, held: frame.locks.length, grants: 0, releases: 0, expiries: 0 }
    if (this.last !== null) {
      for (const id of now.keys()) if (!this.last.locks.has(id)) sample.grants++
      for (const [id, l] of this.last.locks) {
        if (now.has(id)) continue
        // The last frame's store read its lease no earlier than `last.at`, so the lease ended
        // no earlier than `last.at + leaseMs`; this frame's store saw the key gone no later
        // than `answeredAt`. Gone before the earliest end it could have had: released.
        // Otherwise it ran out (or was let go within one read's time of its end). Judged by
        // this frame's `at` instead, a lease that ran out while the read was on its way was
        // counted as a release.
        if (this.last.at + l.leaseMs <= frame.answeredAt) sample.expiries++
        else sample.releases++
      }
    }
    this.last = { at: frame.at, locks: now }
    this.samples.push(sample)
    if (this.samples.length > this.limit) this.samples.shift()
    return sample
  }
}

/**
 * Starts the dashboard for `client`. `options`: { port, host, allowRelease, interval, what
 * (see readFrame), audit(line), notice(line) (a page dropped) }. Resolves with { url, token
 * (null on loopback), close() }.
 */
async function serveDashboard(client, options) {
  const { host, allowRelease, interval, what, audit } = options
  const notice = options.notice ?? (() => {})
  // Known once bound (the address --host resolved to).
  let loopback = false
  // Always made: the release endpoint needs it even on loopback (see the module comment).
  const token = randomBytes(24).toString('base64url')
  const template = fs.readFileSync(PAGE, 'utf8')
  const where = client.toJSON().store
  const sightings = new Sightings()
  const history = new History()
  const streams = new Set()
  let latest = null
  let port = options.port

  // A function, not a string: `$&` or `$'` in the store's name is no replacement pattern.
  const config = scriptJson({ token, allowRelease, store: where, interval })
  const page = template.replace('/*CONFIG*/null', () => config)

  // The Host headers that name this server, as a URL writes them (a browser writes
  // [::ffff:127.0.0.1] as [::ffff:7f00:1]); known once bound.
  let ownHosts = new Set()
  function allowed(req, url) {
    if (!loopback) return sameToken(url.searchParams.get('token') ?? req.headers['x-deadbolt-token'], token)
    return ownHosts.has(hostOf(String(req.headers.host ?? '')))
  }

  function send(res, status, type, body) {
    res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store', 'x-content-type-options': 'nosniff', 'referrer-policy': 'no-referrer' })
    res.end(body)
  }

  async function release(req, res) {
    if (!allowRelease) return send(res, 403, 'application/json', JSON.stringify({ error: 'read-only: start the dashboard with --allow-release' }))
    if (!sameToken(req.headers['x-deadbolt-token'], token)) return send(res, 403, 'application/json', JSON.stringify({ error: 'missing or wrong token' }))
    let body = ''
    for await (const chunk of req) {
      body += chunk
      if (body.length > MAX_BODY) return send(res, 413, 'application/json', JSON.stringify({ error: 'too large' }))
    }
    let key
    try {
      key = JSON.parse(body).key
    } catch {
      key = undefined
    }
    if (typeof key !== 'string' || key === '') return send(res, 400, 'application/json', JSON.stringify({ error: 'a JSON body { "key": "…" } is needed' }))
    try {
      const before = await client.inspect(key)
      const released = await client.forceRelease(key)
      // The key and holder come from the page and the store: escaped for the operator's terminal.
      audit(`${new Date().toISOString()} force-release ${jsonLine(key)} previous holder ${visible(before?.owner ?? '–')}${before?.holder ? ` (${visible(holderText(before.holder))})` : ''} token ${before?.fencingToken ?? '–'} released ${released} from ${req.socket.remoteAddress}`)
      send(res, 200, 'application/json', JSON.stringify({ key, released, previousHolder: before?.owner ?? null }))
    } catch (err) {
      send(res, 502, 'application/json', JSON.stringify({ error: err.message, code: err.code }))
    }
  }

  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://dashboard.invalid')
    if (!allowed(req, url)) return send(res, 403, 'text/plain; charset=utf-8', 'forbidden: open the address the dashboard printed (with its token)\n')
    if (req.method === 'GET' && url.pathname === '/') return send(res, 200, 'text/html; charset=utf-8', page)
    if (req.method === 'GET' && url.pathname === '/events') {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' })
      res.write(`retry: ${Math.max(1000, interval)}\n\n`)
      streams.add(res)
      if (latest !== null) res.write(latest)
      req.on('close', () => streams.delete(res))
      return
    }
    if (req.method === 'POST' && url.pathname === '/release') {
      release(req, res).catch(() => res.destroy())
      return
    }
    send(res, 404, 'text/plain; charset=utf-8', 'not found\n')
  })

  let stopped = false
  let timer = null
  async function tick() {
    let message
    try {
      const frame = await readFrame(client, what)
      frame.locks = sightings.see(frame.locks, frame.at)
      history.add(frame)
      message = `data: ${JSON.stringify({ frame, history: history.samples })}\n\n`
    } catch (err) {
      message = `event: failure\ndata: ${JSON.stringify({ message: err.message, code: err.code ?? null })}\n\n`
    }
    latest = message
    const bound = Math.max(MAX_QUEUED, 3 * Buffer.byteLength(message))
    for (const res of streams) {
      if (res.writableLength > bound) {
        const waiting = res.writableLength
        const from = res.socket?.remoteAddress ?? 'a closed socket'
        streams.delete(res)
        res.destroy()
        notice(`${new Date().toISOString()} dropped a page that did not read its events (${waiting} bytes waiting) from ${from}`)
      } else {
        res.write(message)
      }
    }
    if (!stopped) timer = setTimeout(tick, interval)
  }

  await new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port, host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  port = server.address().port
  loopback = isLoopback(server.address().address)
  ownHosts = new Set(['127.0.0.1', 'localhost', '[::1]', host.includes(':') ? `[${host}]` : host].map((h) => hostOf(`${h}:${port}`)).filter((h) => h !== null))
  await tick()
  const shownHost = host.includes(':') ? `[${host}]` : host
  return {
    url: `http://${shownHost}:${port}/${loopback ? '' : `?token=${token}`}`,
    token: loopback ? null : token,
    async close() {
      stopped = true
      clearTimeout(timer)
      for (const res of streams) res.end()
      await new Promise((resolve) => server.close(resolve))
    },
  }
}

module.exports = { serveDashboard, History }
