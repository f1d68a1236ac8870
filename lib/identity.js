'use strict'
// Who holds a lock. A client writes its host name, pid and `name` into the owner token it
// stores with every lock, permit and leadership, so any process (the CLI, `top`, the
// dashboard, another service) can tell who holds what on every store without a second
// record, and without touching the user's payload. The redislock and sql-lock faces keep their
// own owners (the redislock wire format is unchanged).
//
// An owner is `<16 random base64url chars>.<host>.<pid>.<name>.<sequence in base 36>`, with host and name
// restricted to [A-Za-z0-9_-] and anything else in the host written as %XX (so `.` only ever
// separates fields); with `identity: false` it is `<16 random chars>.<sequence>`, as before.
// At most 16 + 1 + 80 + 1 + 10 + 1 + 64 + 1 + 11 = 185 bytes: within every store's owner limit
// (255 bytes on the SQL stores).

const os = require('os')
const { randomBytes } = require('crypto')
const v = require('./validate')

/** The longest client `name`, in characters (all ASCII). */
const MAX_NAME = 64
/** The longest host field, once encoded. */
const MAX_HOST = 80
const NAME = new RegExp(`^[A-Za-z0-9_-]{1,${MAX_NAME}}$`)
const OWNER = /^[A-Za-z0-9_-]{16}\.([A-Za-z0-9_%-]*)\.(\d{1,10})\.([A-Za-z0-9_-]*)\.[0-9a-z]{1,11}$/

/** Checks `connect()`'s `name` option. */
function checkName(name) {
  if (typeof name !== 'string') throw v.typeError('options.name', 'of type string', name)
  if (!NAME.test(name)) throw v.valueError('options.name', `must be 1 to ${MAX_NAME} letters, digits, '_' or '-'`, name)
  return name
}

/** `host` with every byte outside [A-Za-z0-9_-] as %XX, cut to MAX_HOST at a whole escape. */
function encodeHost(host) {
  let out = ''
  for (const byte of Buffer.from(host, 'utf8')) {
    const c = String.fromCharCode(byte)
    const piece = /[A-Za-z0-9_-]/.test(c) ? c : '%' + byte.toString(16).toUpperCase().padStart(2, '0')
    if (out.length + piece.length > MAX_HOST) break
    out += piece
  }
  return out
}

/**
 * The prefix of every owner token a client makes (the native side appends the acquisition's
 * sequence number). `identity`: false for a bare random prefix.
 */
function ownerPrefix({ identity = true, name } = {}) {
  const random = randomBytes(12).toString('base64url')
  if (identity === false) return random + '.'
  return `${random}.${encodeHost(os.hostname())}.${process.pid}.${name ?? ''}.`
}

/**
 * The holder an owner token names: `{ host, pid, name }` (name null when the client had none),
 * or null for an owner without identity (`identity: false`, another library, a drop-in face).
 */
function holderOf(owner) {
  if (typeof owner !== 'string') return null
  const m = OWNER.exec(owner)
  if (m === null) return null
  // Byte by byte: a host cut at MAX_HOST may end inside a UTF-8 sequence (shown as U+FFFD).
  const host = Buffer.from(m[1].replace(/%([0-9A-F]{2})|([^%])/g, (_, hex, c) => String.fromCharCode(hex ? parseInt(hex, 16) : c.charCodeAt(0))), 'latin1').toString('utf8')
  return { host, pid: Number(m[2]), name: m[3] === '' ? null : m[3] }
}

/** A holder in a few characters, for tables: `name@host/pid` (`host/pid` without a name), or null. */
function holderText(holder) {
  if (!holder) return null
  return `${holder.name === null ? '' : `${holder.name}@`}${holder.host}/${holder.pid}`
}

/** A holder as the CLI's lines end with it: `  host: h  pid: p  name: n` (nothing for null). */
function holderFields(holder) {
  if (!holder) return ''
  return `  host: ${holder.host}  pid: ${holder.pid}${holder.name === null ? '' : `  name: ${holder.name}`}`
}

module.exports = { checkName, ownerPrefix, holderOf, holderText, holderFields, MAX_NAME }
