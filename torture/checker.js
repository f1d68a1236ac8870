'use strict'
// Turns a scenario's event log, resource log and fault log into its figures, and the
// invariants every scenario must keep into violations:
//   overlaps       two grants of one key (different holders or tokens) whose holders both
//                  read `lock.held === true` over intersecting intervals (first..last such read;
//                  a read happened between its event's `t0` and `t`, so a grant's interval is
//                  taken from its first read's `t` to its last read's `t0`: what it surely spans)
//   stale accepted the resource accepted a token lower than one it had accepted before for
//                  the key, or accepted one token from two different workers
//   token viol.    one token granted twice for a key, or a grant whose token is lower than a
//                  token already released for that key (within one token epoch: a store
//                  restart without persistence starts a new epoch, as documented)
//   dead grants    an acquisition that resolved with a lock already not held

function groupBy(xs, f) {
  const m = new Map()
  for (const x of xs) {
    const k = f(x)
    if (!m.has(k)) m.set(k, [])
    m.get(k).push(x)
  }
  return m
}

function overlaps(events) {
  const intervals = new Map() // key → Map(grantId → [start, end, w, token])
  for (const e of events) {
    if (e.ev !== 'write' || e.held !== true) continue
    if (!intervals.has(e.key)) intervals.set(e.key, new Map())
    const g = intervals.get(e.key)
    const id = `${e.w}|${e.g ?? e.token}`
    const before = e.t0 ?? e.t
    const iv = g.get(id)
    if (iv) { iv[0] = Math.min(iv[0], e.t); iv[1] = Math.max(iv[1], before) } else g.set(id, [e.t, before, e.w, e.token])
  }
  let count = 0
  let maxMs = 0
  const examples = []
  for (const [key, g] of intervals) {
    // A single read (or reads closer together than a descheduling) spans nothing for sure.
    const ivs = [...g.values()].filter((iv) => iv[0] <= iv[1]).sort((a, b) => a[0] - b[0])
    for (let i = 0; i < ivs.length; i++) {
      for (let j = i + 1; j < ivs.length && ivs[j][0] <= ivs[i][1]; j++) {
        count++
        const ms = Math.min(ivs[i][1], ivs[j][1]) - ivs[j][0]
        maxMs = Math.max(maxMs, ms)
        if (examples.length < 3) examples.push(`${key}: ${ivs[i][2]}#${ivs[i][3]} and ${ivs[j][2]}#${ivs[j][3]} both held for ${ms.toFixed(0)} ms`)
      }
    }
  }
  return { count, maxMs, examples }
}

function staleAccepted(resourceLog, epochs = []) {
  const epochOf = (t) => epochs.filter((x) => x <= t).length
  let stale = 0
  const examples = []
  // Within an epoch: a store that lost its counters (documented for Redis without
  // persistence) hands out old tokens again, which fencing cannot tell apart.
  for (const [gk, writes] of groupBy(resourceLog, (r) => `${r.key}\u0000${epochOf(r.t)}`)) {
    const key = gk.split('\u0000')[0]
    let max = null
    const writerOf = new Map()
    for (const r of writes) {
      if (!r.accepted) continue
      if (max !== null && r.token < max) { stale++; if (examples.length < 3) examples.push(`${key}: ${r.w} wrote with ${r.token} after ${max}`) }
      if (max === null || r.token > max) max = r.token
      const prev = writerOf.get(r.token)
      if (prev !== undefined && prev !== r.w) { stale++; if (examples.length < 3) examples.push(`${key}: token ${r.token} accepted from ${prev} and ${r.w}`) }
      writerOf.set(r.token, r.w)
    }
  }
  return { stale, examples }
}

function tokenViolations(events, epochs = []) {
  const epochOf = (t) => epochs.filter((x) => x <= t).length
  let violations = 0
  let duplicates = 0
  const examples = []
  const grants = events.filter((e) => e.ev === 'acquire' && e.token !== undefined)
  for (const [gk, gs] of groupBy(grants, (e) => `${e.key}\u0000${epochOf(e.t)}`)) {
    const key = gk.split('\u0000')[0]
    const seen = new Map()
    for (const g of gs) {
      if (seen.has(g.token)) { violations++; duplicates++; if (examples.length < 3) examples.push(`${key}: token ${g.token} granted to ${seen.get(g.token)} and ${g.w}`) }
      seen.set(g.token, g.w)
    }
    const releases = events.filter((e) => e.ev === 'release' && e.ok === true && e.key === key && `${e.key}\u0000${epochOf(e.t)}` === gk)
    for (const g of gs) {
      const tok = BigInt(g.token)
      const higher = releases.find((r) => r.t < g.t && BigInt(r.token) > tok)
      if (higher) { violations++; if (examples.length < 3) examples.push(`${key}: ${g.w} granted ${tok} after ${higher.w} released ${higher.token}`) }
    }
  }
  return { violations, duplicates, examples }
}

/** Figures and the common invariants of one scenario run. */
function check(h, leftover) {
  const ov = overlaps(h.events)
  const st = staleAccepted(h.resource.log, h.epochs ?? [])
  const tv = tokenViolations(h.events, h.epochs ?? [])
  const losses = h.events.filter((e) => e.ev === 'lost').length
  const lateness = h.figures.lateness ?? []
  const takeover = h.figures.takeover ?? []
  const figures = {
    acquisitions: h.events.filter((e) => e.ev === 'acquire').length,
    faults: h.faults.length,
    overlaps: ov.count,
    staleAccepted: st.stale,
    tokenViolations: tv.violations,
    losses,
    maxLossLatenessMs: lateness.length ? Math.max(...lateness) : null,
    takeoverMs: takeover.length ? Math.max(...takeover) : null,
    leftover,
    writes: h.resource.log.length,
    refused: h.resource.log.filter((r) => !r.accepted).length,
    failedCalls: h.figures.failed ?? null,
  }
  const violations = []
  // Where the store documents that two clients can hold across a change (an asynchronous
  // failover), an overlap is a figure and fencing (0 stale writes) is the invariant.
  if (ov.count > 0 && h.overlapsAllowed) h.notes.push(`${ov.count} overlap(s), up to ${ov.maxMs.toFixed(0)} ms, allowed: ${h.overlapsAllowed}`)
  else if (ov.count > 0) violations.push(`${ov.count} overlap(s), up to ${ov.maxMs.toFixed(0)} ms: ${ov.examples.join('; ')}`)
  if (st.stale > 0) violations.push(`${st.stale} stale write(s) accepted: ${st.examples.join('; ')}`)
  // Likewise where clients may be granted by two primaries for a while (an asynchronous
  // failover): a grant by the old one can come after a higher one by the new, and the
  // resource refuses it. A token granted twice is still a violation: fencing cannot tell the
  // two holders apart.
  if (tv.violations > 0 && tv.duplicates === 0 && h.tokensMayRegress) h.notes.push(`${tv.violations} token(s) below one already released, allowed: ${h.tokensMayRegress}: ${tv.examples.join('; ')}`)
  else if (tv.violations > 0) violations.push(`${tv.violations} token violation(s): ${tv.examples.join('; ')}`)
  // A grant is a lock the caller holds: one that arrives with held === false is no grant.
  const doa = h.events.filter((e) => e.ev === 'acquire' && e.held === false)
  if (doa.length > 0) violations.push(`${doa.length} grant(s) arrived already lost (held === false when acquire resolved): ${doa.slice(0, 3).map((e) => `${e.w} ${e.key.slice(-12)}#${e.token}`).join(', ')}`)
  if (leftover === null) violations.push('leftover state could not be read')
  else if (leftover > 0) violations.push(`${leftover} key(s)/row(s) left in the store beyond the per-name budget: ${(h.leftoverNames ?? []).slice(0, 3).join(', ')}`)
  return { figures, violations }
}

module.exports = { check, overlaps, staleAccepted, tokenViolations }
