'use strict'
// The protected resource: it accepts a write for a key only with a fencing token not lower
// than the last token it accepted for that key (the classic fencing check), and keeps a log
// of every write it was offered, for the checker.

class Resource {
  constructor(now) {
    this.now = now
    this.last = new Map() // key → highest accepted token (bigint)
    this.log = [] // { w, wid, key, token, held, accepted, t }
  }

  offer(w, { wid, key, token, held }) {
    const tok = BigInt(token)
    const last = this.last.get(key)
    const accepted = last === undefined || tok >= last
    if (accepted) this.last.set(key, tok)
    this.log.push({ w, wid, key, token: tok, held, accepted, t: this.now() })
    return accepted
  }
}

module.exports = { Resource }
