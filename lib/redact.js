'use strict'
// Secrets never appear in an error, a log line or util.inspect: what a connection URL or
// option carries that could be one (a password, a token in the query) is known here, and
// every message that crosses from the native side is scrubbed of it.

const MASK = '***'

/** The secrets in a connection URL: its password and any password/token query value. */
function secretsOf(url) {
  const out = []
  if (typeof url !== 'string') return out
  const m = /^[a-z][a-z0-9+.-]*:\/\/([^@/?#]*)@/i.exec(url)
  if (m) {
    const colon = m[1].indexOf(':')
    if (colon >= 0) {
      const password = m[1].slice(colon + 1)
      if (password !== '') {
        out.push(password)
        try { out.push(decodeURIComponent(password)) } catch {}
      }
    }
  }
  const q = url.indexOf('?')
  if (q >= 0) {
    for (const pair of url.slice(q + 1).split('&')) {
      const eq = pair.indexOf('=')
      if (eq > 0 && /pass|secret|token|key/i.test(pair.slice(0, eq)) && eq < pair.length - 1) {
        out.push(pair.slice(eq + 1))
      }
    }
  }
  // Longest first, so a secret that contains another is masked whole.
  return [...new Set(out)].filter((s) => s.length > 0).sort((a, b) => b.length - a.length)
}

/** `text` with every secret replaced by ***. */
function scrub(text, secrets) {
  if (typeof text !== 'string' || !secrets || secrets.length === 0) return text
  let out = text
  for (const s of secrets) out = out.split(s).join(MASK)
  return out
}

/** A URL fit to show: the password (and secret query values) masked. */
function redactUrl(url) {
  if (typeof url !== 'string') return url
  return scrub(url, secretsOf(url))
}

module.exports = { secretsOf, scrub, redactUrl }
