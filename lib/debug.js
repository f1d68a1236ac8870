'use strict'
// Debug logging, as the native side does it (src/runtime/debug.rs): `DEBUG=deadbolt:*` (or
// `deadbolt`, or `*`) or `NODE_DEBUG=deadbolt` prints `DEADBOLT <pid>: …` lines on stderr.
// Off by default, and then a no-op. Lines never carry a URL, a password or a driver message.
// Each line has a namespace, `deadbolt:<its first word>`, and `DEBUG` picks namespaces as the
// `debug` package does: `*` matches anything, a leading `-` excludes (`deadbolt:*,-deadbolt:lost`).

/** The namespaces the JavaScript side logs in (the native side has its own list). */
const NAMESPACES = ['lost', 'client', 'weblocks']

/** `pattern` (`*` matching anything) as a RegExp for whole names. */
function glob(pattern) {
  return new RegExp(`^${pattern.split('*').map((s) => s.replace(/[\\^$.+?()[\]{}|]/g, '\\$&')).join('.*')}$`)
}

/** Which namespaces `env`'s DEBUG and NODE_DEBUG ask for: `{ wants(ns), any }`. */
function filterOf(env) {
  const list = (v, sep) => String(v ?? '').split(sep).map((s) => s.trim().toLowerCase()).filter(Boolean)
  let all = list(env.NODE_DEBUG, /,/).some((n) => n === 'deadbolt' || n === '*')
  const include = []
  const exclude = []
  for (const n of list(env.DEBUG, /[,\s]/)) {
    if (n.startsWith('-')) exclude.push(glob(n.slice(1)))
    else if (n === 'deadbolt') all = true
    else include.push(glob(n))
  }
  const wants = (ns) => {
    const full = `deadbolt:${ns}`
    if (exclude.some((p) => p.test(full))) return false
    return all || include.some((p) => p.test(full))
  }
  return { wants, any: NAMESPACES.some(wants) }
}

/** Whether `env` asks for any of the JavaScript side's debug output. */
function wanted(env) {
  return filterOf(env).any
}

const filter = filterOf(process.env)
const enabled = filter.any

/**
 * Writes one line of namespace `deadbolt:<ns>` when it is asked for. `line` is a function, so
 * nothing is built otherwise. A line starts with its namespace.
 */
function debug(ns, line) {
  if (enabled && filter.wants(ns)) process.stderr.write(`DEADBOLT ${process.pid}: ${line()}\n`)
}

module.exports = { debug, enabled, wanted, NAMESPACES }
