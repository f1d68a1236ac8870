'use strict'
// What the CLI prints of names it did not choose. Lock names, owners, holders' hosts and data
// are written by other processes, and a terminal obeys what it is sent: `\x1b]0;…\x07` sets the
// window title, `\x1b[2J` wipes the screen, U+009B starts a command on many terminals, `\r`
// overwrites a line, U+202E reverses what follows. Every text printer (`top`, `list`,
// `inspect`, `watch`, `leader`, `permits`, `release`, the dashboard's audit lines) passes such
// text through `visible`, and every `--json` line is written by `jsonLine`.

/**
 * Control (C0, DEL, C1), format (bidi embeddings, overrides and isolates, zero-width
 * characters, U+FEFF, tags …), line and paragraph separators, lone surrogates, and the
 * backslash (so that an escape printed is never mistaken for one in the name).
 */
const UNSAFE = /[\\\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}]/gu
const SHORT = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r' }

function hex(n, width) {
  return n.toString(16).padStart(width, '0')
}

/** `text` with every unsafe character written as an escape: `\x1b`, `\u202e`, `\u{e0001}`. */
function visible(text) {
  return String(text).replace(UNSAFE, (c) => {
    if (Object.hasOwn(SHORT, c)) return SHORT[c]
    const code = c.codePointAt(0)
    if (code <= 0xff) return `\\x${hex(code, 2)}`
    if (code <= 0xffff) return `\\u${hex(code, 4)}`
    return `\\u{${hex(code, 1)}}`
  })
}

/** The non-ASCII characters JSON.stringify leaves raw that a terminal may act on. */
const JSON_UNSAFE = /[\u007f-\u009f\p{Cf}\p{Zl}\p{Zp}]/gu

/**
 * `JSON.stringify(value)` with DEL, C1, format and separator characters written as `\uXXXX`
 * (a pair of them beyond U+FFFF): still the same JSON, and nothing in it a terminal acts on.
 * They can only stand inside strings, where an escape means the same character.
 */
function jsonLine(value) {
  return JSON.stringify(value).replace(JSON_UNSAFE, (c) => {
    let out = ''
    for (let i = 0; i < c.length; i++) out += `\\u${hex(c.charCodeAt(i), 4)}`
    return out
  })
}

module.exports = { visible, jsonLine }
