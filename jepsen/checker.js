'use strict'
// Checks one schedule's history against its workload's model. The history is what the
// workers logged (invoke/ok/fail, grant, sample, write, lost, end), the register's log and
// the fault log, all on one monotonic clock (CLOCK_MONOTONIC, read through
// process.hrtime.bigint() in every process).
//
// A believed hold of grant g runs from its grant (the call resolved) to the first of: the
// actor's `end` (logged before its release, at a `held === false` read, at a hand-over), the
// loss notice (`signal` aborted / onLost / onRevoked), the local deadline it last read
// (`validUntil`, which `held` is measured against), the kill of its process.
//
// SLACK_MS is the measurement slack for two holds of different processes: a `validUntil`
// converted from the wall clock to the monotonic one (Date.now() has 1 ms resolution) and
// the time between a promise settling and its line being stamped, both ≤ 1–2 ms here.
//
// Invariants (each a violation): no two conflicting believed holds of a key overlap by more
// than SLACK_MS (exclusive: any two; read-write: a write with anything; semaphore: never
// more than `limit` at once); no stale write accepted by the register (torture/checker.js);
// no token granted twice, and a grant's token above that of every grant of the key that
// ended before it began; every call settles within its bound (pauses and stalls of its own
// process not counted); a holder hears of a loss (notice or `held === false`) within
// LOSS_MS of its local deadline (its own pauses not counted); no grant arrives already lost
// (`held` false when read first thing once its call settled; a lease that runs out between
// that read and the grant's line is counted as `lapsedBeforeLog`, no violation); nothing of the run left in the store; no call left without an answer (unknown) unless its
// process was killed.

const { staleAccepted } = require('../torture/checker')

const short = (key) => key.replace(/^jepsen:[0-9a-f]+:/, '')

const SLACK_MS = 5
const LOSS_MS = 1500
const CALL_SLACK_MS = 1500

/** Time in [from, to] during which worker `w` was paused or stalled (by the fault log). */
function stoppedWithin(faults, w, from, to) {
  let ms = 0
  for (const f of faults) {
    if (f.worker !== w || !(f.kind === 'pause-holder' || f.kind === 'stall')) continue
    const end = f.end ?? to
    ms += Math.max(0, Math.min(end, to) - Math.max(f.t, from))
  }
  return ms
}

/** The believed holds of a history, by grant id. */
function holds(events, faults, runEnd) {
  const byG = new Map()
  const killedAt = new Map()
  for (const f of faults) if (f.kind === 'kill-holder' && f.worker) killedAt.set(f.worker, f.t)
  // When each actor last sent a call: a grant's request left no later than that.
  const asked = new Map()
  for (const e of events) {
    if (e.ev === 'invoke') asked.set(e.a, e.t)
    if (e.ev === 'grant') {
      byG.set(e.g, { g: e.g, a: e.a, w: e.w, key: e.key, token: e.token === null ? null : BigInt(e.token), owner: e.owner, mode: e.mode ?? 'x', adoptOf: e.adoptOf ?? null, start: e.t, asked: Math.min(asked.get(e.a) ?? e.t, e.t), vu: e.vu ?? null, heldAtGrant: e.settledHeld ?? e.held, heldAtLog: e.held, endT: null, why: null, lostT: null, falseT: null })
      continue
    }
    const h = e.g !== undefined ? byG.get(e.g) : undefined
    if (!h) continue
    if (e.ev === 'sample') {
      if (e.held && e.vu !== null && e.vu !== undefined) h.vu = h.vu === null ? e.vu : Math.max(h.vu, e.vu)
      if (!e.held && h.falseT === null) h.falseT = e.t0 ?? e.t
    } else if (e.ev === 'end' && h.endT === null) { h.endT = e.t; h.why = e.why } else if (e.ev === 'lost' && h.lostT === null) h.lostT = e.t
  }
  for (const h of byG.values()) {
    const killed = killedAt.get(h.w)
    const ends = [h.endT, h.lostT, h.falseT, h.vu, killed !== undefined && killed >= h.start ? killed : null].filter((x) => x !== null && x !== undefined)
    h.end = ends.length ? Math.min(...ends) : runEnd
    h.killed = killed !== undefined && killed >= h.start
  }
  return [...byG.values()]
}

/** One hold, for a violation's message: grant, owner, token, span and how it ended. */
function holdNote(h) {
  const how = h.endT !== null && h.end === h.endT ? h.why : h.lostT !== null && h.end === h.lostT ? 'lost' : h.falseT !== null && h.end === h.falseT ? 'held-false' : h.killed && h.end !== h.vu ? 'killed' : h.vu !== null && h.end === h.vu ? 'deadline' : 'run end'
  return `${h.g} owner ${h.owner} token ${h.token} ${h.start.toFixed(0)}–${h.end.toFixed(0)} ${how}`
}

const conflicts = (kind, a, b) => kind === 'exclusive' || a.mode === 'x' || b.mode === 'x'

function check({ events, resourceLog, faults, model, params, bound, leftover, runEnd, sharedPermitTokens = false }) {
  const violations = []
  const hs = holds(events, faults, runEnd)
  const byKey = new Map()
  for (const h of hs) { if (!byKey.has(h.key)) byKey.set(h.key, []); byKey.get(h.key).push(h) }
  for (const list of byKey.values()) list.sort((x, y) => x.start - y.start)

  // 1. believed holds
  let overlaps = 0
  let maxOverlapMs = 0
  const ex = []
  // An overlap that follows a forward jump of the server's clock made while the earlier hold
  // was out: that jump ended the lease early on the server, the documented limit of a lease
  // (docs/guarantees.md). Counted apart so a run says which overlaps it explains; still
  // violations.
  const jumps = faults.filter((f) => f.kind === 'clock-jump' && f.t !== undefined).map((f) => f.t)
  const jumpedWithin = (from, to) => jumps.some((t) => t >= from && t <= to)
  let afterJump = 0
  // Likewise an overlap that follows a forward step of the host's wall clock, which the
  // harness found (jepsen/hostclock.js), not made: every server's leases ended early at once.
  // A step was made somewhere between the two samples around it (`from` to `t`).
  const steps = faults.filter((f) => f.kind === 'host-clock-step' && f.ms > 0)
  const steppedWithin = (from, to) => steps.some((f) => f.t >= from && f.from <= to)
  let afterStep = 0
  if (model.kind === 'semaphore') {
    for (const [key, list] of byKey) {
      const pts = []
      for (const h of list) if (h.end - h.start > 2 * SLACK_MS) { pts.push([h.start + SLACK_MS, 1, h]); pts.push([h.end - SLACK_MS, -1, h]) }
      pts.sort((x, y) => x[0] - y[0] || x[1] - y[1])
      let n = 0
      const active = new Set()
      for (const [t, d, h] of pts) {
        n += d
        if (d > 0) active.add(h)
        else active.delete(h)
        if (n <= params.limit) continue
        overlaps++
        const first = Math.min(...[...active].map((x) => x.start))
        if (jumpedWithin(first, t)) afterJump++
        if (steppedWithin(first, t)) afterStep++
        // Each holder named with how its hold began and ended, so that a run that cannot be
        // replayed still tells which grants were out at once and what each believed.
        if (ex.length < 3) ex.push(`${short(key)}: ${n} holders of ${params.limit} permits at ${t.toFixed(0)} (${[...active].map(holdNote).join('; ')})`)
      }
    }
  } else {
    for (const [key, list] of byKey) {
      for (let i = 0; i < list.length; i++) {
        for (let j = i + 1; j < list.length && list[j].start < list[i].end; j++) {
          const a = list[i]
          const b = list[j]
          if (!conflicts(model.kind, a, b) || (a.owner && a.owner === b.owner)) continue
          const ms = Math.min(a.end, b.end) - b.start
          if (ms <= SLACK_MS) continue
          overlaps++
          if (jumpedWithin(a.start, b.start)) afterJump++
          if (steppedWithin(a.start, b.start)) afterStep++
          maxOverlapMs = Math.max(maxOverlapMs, ms)
          if (ex.length < 3) ex.push(`${short(key)}: ${a.g} (token ${a.token}) and ${b.g} (token ${b.token}) both believed held for ${ms.toFixed(0)} ms from ${b.start.toFixed(0)}`)
        }
      }
    }
  }
  const share = (n) => (n === overlaps ? 'each' : `${n} of them`)
  const jumped = (afterJump ? ` (${share(afterJump)} after a forward jump of the server's clock while the earlier hold was out)` : '') +
    (afterStep ? ` (${share(afterStep)} after a forward step of the host's wall clock, which every server's leases run on, while the earlier hold was out)` : '')
  if (overlaps) violations.push(`${overlaps} overlapping believed hold(s)${maxOverlapMs ? `, up to ${maxOverlapMs.toFixed(0)} ms` : ''}${jumped}: ${ex.join('; ')}`)

  // 2. register
  if (model.register) {
    const st = staleAccepted(resourceLog)
    if (st.stale) violations.push(`${st.stale} stale write(s) accepted: ${st.examples.join('; ')}`)
  }

  // 2b. scheduled jobs: no tick runs twice; ticks missed, and those no fault, run or
  // stopped schedule explains
  const tickFigures = model.ticks ? checkTicks(events, faults, hs, model.ticks, params, runEnd, violations) : {}

  // 3. tokens
  let tokenViol = 0
  const tex = []
  for (const [key, list] of byKey) {
    const seen = new Map()
    for (const h of list) {
      if (h.token === null) continue
      const prev = seen.get(h.token)
      // Redlock: two permit holders at once, or two shared holders (a read lock, a shared
      // Web Lock), may share a token (docs/stores/redis.md); never two holds that did not
      // overlap, nor one that excludes the other.
      const together = model.kind === 'semaphore' || (prev?.mode !== 'x' && h.mode !== 'x')
      const shared = prev && sharedPermitTokens && together && prev.start < h.end && h.start < prev.end
      if (prev && !shared && !(h.adoptOf && prev.owner === h.owner)) { tokenViol++; if (tex.length < 3) tex.push(`${short(key)}: token ${h.token} granted to ${prev.g} and ${h.g}`) }
      if (!prev) seen.set(h.token, h)
      // Only a hold that ended before this grant was asked for must have a lower token: the
      // store may have drawn this one earlier and its reply come late (Cluster, seed 6242: a
      // shared read asked first, drew 9, and was answered 200 ms after another drew 10 and
      // released).
      const before = list.find((p) => p !== h && p.token !== null && p.end < h.asked && p.token >= h.token && p.owner !== h.owner)
      if (before && !prev) { tokenViol++; if (tex.length < 3) tex.push(`${short(key)}: ${h.g} granted ${h.token} after ${before.g} held ${before.token}`) }
    }
  }
  if (tokenViol) violations.push(`${tokenViol} token violation(s): ${tex.join('; ')}`)

  // 4. call bounds, and calls never answered
  const invokes = new Map()
  let late = 0
  let unknown = 0
  const lex = []
  const killed = new Set(faults.filter((f) => f.kind === 'kill-holder').map((f) => f.worker))
  for (const e of events) {
    if (e.ev === 'invoke') invokes.set(e.id, e)
    else if ((e.ev === 'ok' || e.ev === 'fail') && invokes.has(e.id)) {
      const i = invokes.get(e.id)
      invokes.delete(e.id)
      const b = bound(e.f)
      if (b === null) continue
      const ms = e.t - i.t - stoppedWithin(faults, e.w, i.t, e.t)
      if (ms > b + CALL_SLACK_MS) { late++; if (lex.length < 3) lex.push(`${e.a} ${e.f} took ${ms.toFixed(0)} ms (bound ${b} ms)`) }
    }
  }
  for (const i of invokes.values()) if (!killed.has(i.w) && bound(i.f) !== null) { unknown++; if (lex.length < 3) lex.push(`${i.a} ${i.f} never answered`) }
  if (late + unknown) violations.push(`${late + unknown} call(s) beyond their bound or never answered: ${lex.join('; ')}`)

  // 5. hearing of a loss; grants already lost
  let deaf = 0
  const dex = []
  for (const h of hs) {
    if (h.killed || h.vu === null || h.why === 'release' || h.why === 'handover') continue
    if (h.endT !== null && h.endT < h.vu) continue // ended before its deadline
    const heard = Math.min(h.lostT ?? Infinity, h.falseT ?? Infinity)
    if (heard === Infinity) continue // stopped before its deadline (run end): nothing to hear
    const lateMs = heard - h.vu - stoppedWithin(faults, h.w, h.vu, heard)
    if (lateMs > LOSS_MS) { deaf++; if (dex.length < 3) dex.push(`${h.g} heard ${lateMs.toFixed(0)} ms after its deadline`) }
  }
  if (deaf) violations.push(`${deaf} loss(es) heard late: ${dex.join('; ')}`)
  const doa = hs.filter((h) => h.heldAtGrant === false)
  if (doa.length) violations.push(`${doa.length} grant(s) arrived already lost: ${doa.slice(0, 3).map((h) => h.g).join(', ')}`)
  // Held when the call settled, not by the time the grant was logged: the lease ran out in
  // between (a grant answered close to its local deadline, then the worker descheduled or
  // its pipe full). Counted, not a violation: no library can keep a lease from ending.
  const lapsed = hs.filter((h) => h.heldAtGrant === true && h.heldAtLog === false).length

  // 6. bounded state (what the workload keeps by design, such as a job's run record, aside)
  if (leftover !== null && model.keeps) leftover = leftover.filter((k) => !model.keeps(k))
  if (leftover === null) violations.push('leftover state could not be read')
  else if (leftover.length) violations.push(`${leftover.length} key(s) of the run left in the store: ${leftover.slice(0, 3).join(', ')}`)

  const ops = events.filter((e) => e.ev === 'invoke').length
  const figures = {
    ops,
    grants: hs.length,
    writes: resourceLog.length,
    refused: resourceLog.filter((r) => !r.accepted).length,
    losses: hs.filter((h) => h.lostT !== null).length,
    faults: faults.length,
    overlaps,
    ...(afterJump ? { overlapsAfterJump: afterJump } : {}),
    ...(afterStep ? { overlapsAfterHostStep: afterStep } : {}),
    ...(lapsed ? { lapsedBeforeLog: lapsed } : {}),
    ...tickFigures,
  }
  return { violations, figures, holds: hs }
}

/**
 * The jobs workload's ticks (`tick` events: {key, tick, real}, tick and real on the wall
 * clock, real unskewed): a tick run twice is a violation. A tick between the first and the
 * last one run that nobody ran is a miss; it is explained when a fault was in play then (or
 * until a lease of `ttl` after it), a run held the job then (from its own tick, less the
 * skew, to its end and `atLeastFor`: skipped, not queued), or fewer than two actors had the
 * job scheduled.
 */
function checkTicks(events, faults, hs, { period, atLeastFor, skew }, params, runEnd, violations) {
  const ticks = events.filter((e) => e.ev === 'tick')
  const seen = new Map()
  let twice = 0
  const tex = []
  for (const e of ticks) {
    const id = `${e.key} ${e.tick}`
    const prev = seen.get(id)
    if (prev) { twice++; if (tex.length < 3) tex.push(`${short(e.key)} tick ${e.tick} ran by ${prev.g} and ${e.g}`) } else seen.set(id, e)
  }
  if (twice) violations.push(`${twice} tick(s) ran twice: ${tex.join('; ')}`)
  if (ticks.length === 0) return { ticks: 0, missed: 0, unexplained: 0 }
  // Wall clock to monotonic, from the unskewed wall time each tick line carries.
  const off = ticks.reduce((s, e) => s + (e.real - e.t), 0) / ticks.length
  const mono = (wall) => wall - off
  const ran = new Set(ticks.map((e) => e.tick))
  const first = Math.min(...ran)
  const last = Math.max(...ran)
  // Actors with the job scheduled, over time: from a schedule call's invoke to its stop's answer.
  const spans = []
  const open = new Map()
  for (const e of events) {
    if (e.ev === 'invoke' && e.f === 'schedule') open.set(e.a, e.t)
    else if ((e.ev === 'ok' || e.ev === 'fail') && e.f === 'stop' && open.has(e.a)) { spans.push([open.get(e.a), e.t]); open.delete(e.a) }
  }
  for (const t of open.values()) spans.push([t, runEnd])
  const killedAt = faults.filter((f) => f.kind === 'kill-holder')
  // A run holds the job from its tick (its lock taken then, by a clock up to `skew` ahead) to
  // the end of its hold.
  const holdEnd = new Map(hs.map((h) => [h.g, h.end]))
  const runs = ticks.map((e) => [mono(e.tick) - skew, holdEnd.get(e.g) ?? e.t])
  let missed = 0
  let unexplained = 0
  for (let tick = first; tick <= last; tick += period) {
    if (ran.has(tick)) continue
    missed++
    const m = mono(tick)
    const fault = faults.some((f) => m >= f.t - period && m <= (f.end ?? f.t) + params.ttl + period)
    const held = runs.some(([from, to]) => m >= from - period && m <= to + atLeastFor + period)
    const scheduled = spans.filter(([from, to]) => from <= m && m <= to).length
    const killed = killedAt.some((f) => m >= f.t && m <= f.t + params.ttl + 2 * period)
    if (!fault && !held && !killed && scheduled >= 2) unexplained++
  }
  return { ticks: ran.size, missed, unexplained }
}

module.exports = { check, holds, SLACK_MS, LOSS_MS, CALL_SLACK_MS }
