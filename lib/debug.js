'use strict'
// Debug logging, as the native side does it (src/runtime/debug.rs): `DEBUG=deadbolt` (or
// `deadbolt:*`, or `*`) or `NODE_DEBUG=deadbolt` prints `DEADBOLT <pid>: …` lines on stderr.
// Off by default, and then a no-op. Lines never carry a URL, a password or a driver message.

function wanted(env) {
  const list = (v, sep) => String(v ?? '').split(sep).map((s) => s.trim().toLowerCase()).filter(Boolean)
  const debug = list(env.DEBUG, /[, ]/).some((n) => n === '*' || n === 'deadbolt' || n.startsWith('deadbolt:'))
  const node = list(env.NODE_DEBUG, /,/).some((n) => n === 'deadbolt' || n === '*')
  return debug || node
}

const enabled = wanted(process.env)

/** Writes one line when debug output is on. `line` is a function, so nothing is built otherwise. */
function debug(line) {
  if (enabled) process.stderr.write(`DEADBOLT ${process.pid}: ${line()}\n`)
}

module.exports = { debug, enabled, wanted }
