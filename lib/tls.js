'use strict'
// TLS options: `{ ca, cert, key, servername, rejectUnauthorized }` as Node's tls.connect takes
// them (PEM strings or Buffers; `ca` may be an array), checked before any I/O and turned into
// the Buffers the native side takes. Messages name the option and say what is wrong with it,
// but never quote it: a key must not end up in a log through an error message.

const { createHash, createPrivateKey, randomBytes, X509Certificate } = require('crypto')

const CERT_BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g
const KEY_BLOCK = /-----BEGIN ((?:RSA |EC )?PRIVATE KEY)-----[\s\S]*?-----END \1-----/
const SUPPORTED = new Set(['ca', 'cert', 'key', 'servername', 'rejectUnauthorized'])
// Salts fingerprints, so a digest of a key means nothing outside this process.
const SALT = randomBytes(16)

/** What was received, without its contents. */
function shape(value) {
  if (value === null) return 'null'
  if (typeof value === 'string') return `a string of ${value.length} characters`
  if (Buffer.isBuffer(value)) return `an instance of Buffer (${value.length} bytes)`
  if (value instanceof Uint8Array) return `an instance of ${value.constructor.name} (${value.length} bytes)`
  if (Array.isArray(value)) return `an array of ${value.length} items`
  if (typeof value === 'object') return `an instance of ${value.constructor?.name ?? 'Object'}`
  if (typeof value === 'function') return 'a function'
  return `type ${typeof value}`
}

function typeError(name, expected, value) {
  const err = new TypeError(`The "${name}" argument must be ${expected}. Received ${shape(value)}`)
  err.code = 'ERR_INVALID_ARG_TYPE'
  return err
}

function valueError(name, reason, value) {
  const err = new TypeError(`The argument '${name}' ${reason}. Received ${shape(value)}`)
  err.code = 'ERR_INVALID_ARG_VALUE'
  return err
}

function isPemInput(value) {
  return typeof value === 'string' || value instanceof Uint8Array
}

function text(value) {
  return typeof value === 'string' ? value : Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('latin1')
}

/** The certificate blocks of one PEM input, each parsed; throws naming `name`. */
function certBlocks(value, name) {
  const blocks = text(value).match(CERT_BLOCK) ?? []
  if (blocks.length === 0) throw valueError(name, 'must contain PEM-encoded certificates (-----BEGIN CERTIFICATE-----)', value)
  for (const block of blocks) {
    try {
      new X509Certificate(block) // eslint-disable-line no-new
    } catch {
      throw valueError(name, 'contains a PEM certificate block that is not a valid X.509 certificate', value)
    }
  }
  return blocks
}

function certificates(value, name, allowArray) {
  if (allowArray && Array.isArray(value)) {
    if (value.length === 0) throw valueError(name, 'must not be an empty array', value)
    const blocks = []
    value.forEach((item, i) => {
      if (!isPemInput(item)) throw typeError(`${name}[${i}]`, 'of type string or an instance of Buffer or Uint8Array', item)
      blocks.push(...certBlocks(item, `${name}[${i}]`))
    })
    return Buffer.from(blocks.join('\n') + '\n')
  }
  if (!isPemInput(value)) {
    throw typeError(name, `of type string or an instance of Buffer or Uint8Array${allowArray ? ', or an array of them' : ''}`, value)
  }
  return Buffer.from(certBlocks(value, name).join('\n') + '\n')
}

function privateKey(value, name) {
  if (!isPemInput(value)) throw typeError(name, 'of type string or an instance of Buffer or Uint8Array', value)
  const s = text(value)
  if (/-----BEGIN ENCRYPTED PRIVATE KEY-----/.test(s) || /Proc-Type:\s*4,ENCRYPTED/.test(s)) {
    throw valueError(name, 'is encrypted; give the key unencrypted (a passphrase is not supported)', value)
  }
  const m = KEY_BLOCK.exec(s)
  if (m === null) throw valueError(name, 'must contain a PEM private key (-----BEGIN PRIVATE KEY-----, RSA PRIVATE KEY or EC PRIVATE KEY)', value)
  try {
    createPrivateKey({ key: m[0], format: 'pem' })
  } catch {
    throw valueError(name, 'contains a PEM private key block that cannot be read', value)
  }
  return Buffer.from(m[0] + '\n')
}

/**
 * Checks TLS options and returns them as the native side takes them: `{ ca?, cert?, key? }`
 * as Buffers of PEM blocks, `servername?`, `rejectUnauthorized?`. `strict` refuses keys other
 * than the five supported (for `connect`); the redislock face reads the five from a client's
 * own options and leaves the rest (timeouts, ALPN…) to that client.
 */
function normalizeTls(value, name = 'options.tls', { strict = true } = {}) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw typeError(name, 'of type object ({ ca, cert, key, servername, rejectUnauthorized })', value)
  }
  if (strict) {
    for (const k of Object.keys(value)) {
      if (!SUPPORTED.has(k) && value[k] !== undefined) {
        throw valueError(`${name}.${k}`, 'is not supported (use ca, cert, key, servername or rejectUnauthorized)', value[k])
      }
    }
  }
  const out = {}
  if (value.ca != null) out.ca = certificates(value.ca, `${name}.ca`, true)
  if (value.cert != null) out.cert = certificates(value.cert, `${name}.cert`, false)
  if (value.key != null) out.key = privateKey(value.key, `${name}.key`)
  if ((out.cert === undefined) !== (out.key === undefined)) {
    const missing = out.cert === undefined ? 'cert' : 'key'
    throw valueError(`${name}.${missing}`, `is required with ${name}.${missing === 'cert' ? 'key' : 'cert'} (mutual TLS needs both)`, value[missing])
  }
  if (value.servername != null) {
    if (typeof value.servername !== 'string') throw typeError(`${name}.servername`, 'of type string', value.servername)
    if (value.servername === '') throw valueError(`${name}.servername`, 'must not be empty', value.servername)
    out.servername = value.servername
  }
  if (value.rejectUnauthorized != null) {
    if (typeof value.rejectUnauthorized !== 'boolean') throw typeError(`${name}.rejectUnauthorized`, 'of type boolean', value.rejectUnauthorized)
    out.rejectUnauthorized = value.rejectUnauthorized
  }
  return out
}

/** A digest of normalized TLS options, for telling connections apart; '' for none. */
function tlsFingerprint(tls) {
  if (tls === undefined) return ''
  const h = createHash('sha256').update(SALT)
  for (const k of ['ca', 'cert', 'key']) {
    h.update(k)
    if (tls[k] !== undefined) h.update(String(tls[k].length) + ':').update(tls[k])
  }
  h.update(JSON.stringify([tls.servername ?? null, tls.rejectUnauthorized ?? null]))
  return h.digest('hex')
}

module.exports = { normalizeTls, tlsFingerprint }
