'use strict'
// What `deadbolt top` and `deadbolt dashboard` show: one frame read from the store (held locks,
// the semaphores and elections named on the command line), and how top draws it. Only what the
// store tells is shown; what it cannot tell is null in JSON and `–` on screen, never a guess.
// Every row is an object with named fields; a holder is shown by its identity (name@host/pid,
// lib/identity.js) where its owner token carries one, else by the owner token.

const { MAX_PERMITS } = require('../semaphore')
const { holderText } = require('../identity')
const { visible, jsonLine } = require('./printable')

/** What the views print for something the store cannot tell. */
const UNKNOWN = '–'

/**
 * Remembers when each holder (key, owner, token) was first seen, across frames: how long a
 * lock has been held is not in any store, but a holder seen to appear between two frames has
 * been held since about then, and one already there at the first frame at least since it.
 */
class Sightings {
  constructor() {
    this.first = new Map()
    this.frames = 0
  }

  /** Rows of `frame`'s locks with `heldForMs` (null when unknown) and `heldForAtLeast`. */
  see(locks, at) {
    const now = new Map()
    for (const l of locks) {
      const id = `${l.key}\u0000${l.owner}\u0000${l.fencingToken}`
      const since = this.first.get(id)
      if (since === undefined) {
        // Appeared since the last frame: held since about now. At the first frame it may
        // have been held for any time: unknown for now, a lower bound later.
        now.set(id, { at, known: this.frames > 0 })
      } else {
        now.set(id, since)
      }
    }
    this.first = now
    this.frames++
    return locks.map((l) => {
      const since = now.get(`${l.key}\u0000${l.owner}\u0000${l.fencingToken}`)
      const ms = at - since.at
      const shown = since.known || ms > 0
      return { ...l, heldForMs: shown ? ms : null, heldForAtLeast: shown && !since.known }
    })
  }
}

/**
 * Parses `NAME` or `NAME=LIMIT` (a semaphore named on the command line): the store keeps no
 * limit (every caller passes its own), so it is shown only when given.
 */
function parseSemaphore(spec) {
  const at = spec.lastIndexOf('=')
  if (at > 0 && /^[0-9]+$/.test(spec.slice(at + 1))) return { name: spec.slice(0, at), limit: Number(spec.slice(at + 1)) }
  return { name: spec, limit: null }
}

/** The most locks a listing may ask for (`client.list`'s bound). */
const MAX_LIMIT = 1_000_000

/**
 * Lists at most `limit` held locks under `prefix`, and whether more are held: it asks for one
 * more than it shows (the stores cannot count without reading every lock). Which ones are
 * shown when more are held is the store's order (Redis: SCAN's), not the first by name.
 */
async function listSome(client, prefix, limit) {
  const held = await client.list(prefix, { limit: Math.min(limit + 1, MAX_LIMIT) })
  const more = held.length > limit
  return { held: more ? held.slice(0, limit) : held, more }
}

/**
 * Reads one frame: `{ at, answeredAt, prefix, locks, more, semaphores, leaders, jobs }`: `at`
 * when the reads were sent, `answeredAt` when the last was answered (the store served each
 * between the two), locks sorted by key, jobs (their last run, lib/jobs.js) by name; `more`:
 * more locks are held than the `limit` shown. `what`: { prefix, limit, semaphores:
 * [{ name, limit }], elections: [name] }.
 * Its load on the store: one listing of at most limit + 1 locks, one read per semaphore and
 * per election named, and one listing of at most `limit` job records.
 */
async function readFrame(client, what) {
  const at = Date.now()
  const [{ held, more }, semaphores, leaders, runs] = await Promise.all([
    listSome(client, what.prefix ?? '', what.limit ?? 1000),
    Promise.all((what.semaphores ?? []).map(async ({ name, limit }) => {
      const holders = await client.semaphore(name, { limit: MAX_PERMITS }).holders()
      holders.sort((a, b) => (a.fencingToken < b.fencingToken ? -1 : 1))
      return {
        name,
        taken: holders.reduce((s, h) => s + h.permits, 0),
        limit,
        holders: holders.map((h) => ({ owner: h.owner, holder: h.holder, permits: h.permits, fencingToken: String(h.fencingToken), leaseMs: h.remainingMs })),
      }
    })),
    Promise.all((what.elections ?? []).map(async (name) => {
      const info = await client.leader(name)
      return info === null
        ? { name, owner: null, holder: null, term: null, leaseMs: null }
        : { name, owner: info.owner, holder: info.holder, term: info.fencingToken === null ? null : String(info.fencingToken), leaseMs: info.remainingMs }
    })),
    // The last run of each scheduled job under the prefix (lib/jobs.js).
    client.jobs({ prefix: what.prefix ?? '', limit: what.limit ?? 1000 }),
  ])
  const answeredAt = Date.now()
  held.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
  return {
    at,
    answeredAt,
    prefix: what.prefix ?? '',
    more,
    locks: held.map((i) => ({
      key: i.key,
      owner: i.owner,
      // { host, pid, name } from the owner token, or null (lib/identity.js).
      holder: i.holder,
      // null: the store cannot tell (a lock in the redislock wire format has no token).
      fencingToken: i.fencingToken === null ? null : String(i.fencingToken),
      leaseMs: i.remainingMs,
      data: i.data === null ? null : Buffer.isBuffer(i.data) ? { base64: i.data.toString('base64') } : i.data,
    })),
    semaphores,
    leaders,
    jobs: runs.map((r) => ({
      name: r.name,
      outcome: r.outcome,
      error: r.error,
      startedAt: r.startedAt,
      durationMs: r.durationMs,
      holder: r.holder,
      owner: r.owner,
      fencingToken: r.fencingToken === null ? null : String(r.fencingToken),
      nextDue: r.nextDue,
    })),
  }
}

function seconds(ms) {
  if (ms === null || ms === undefined) return UNKNOWN
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)}s`
  if (ms < 60_000) return `${Math.floor(ms / 1000)}s`
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)}m${String(Math.floor(ms / 1000) % 60).padStart(2, '0')}s`
  return `${Math.floor(ms / 3_600_000)}h${String(Math.floor(ms / 60_000) % 60).padStart(2, '0')}m`
}

/** Columns of a table: [[header, row → text]]. An identity column would be one more entry. */
const LOCK_COLUMNS = [
  ['KEY', (r) => r.key],
  ['HOLDER', (r) => holderText(r.holder) ?? r.owner],
  ['TOKEN', (r) => r.fencingToken ?? UNKNOWN],
  ['LEASE LEFT', (r) => seconds(r.leaseMs)],
  ['HELD FOR', (r) => (r.heldForMs === null ? UNKNOWN : `${r.heldForAtLeast ? '≥' : ''}${seconds(r.heldForMs)}`)],
]
const SEMAPHORE_COLUMNS = [
  ['SEMAPHORE', (r) => r.name],
  ['TAKEN', (r) => String(r.taken)],
  ['LIMIT', (r) => (r.limit === null ? UNKNOWN : String(r.limit))],
  ['HOLDERS', (r) => (r.holders.length === 0 ? UNKNOWN : r.holders.map((h) => `${holderText(h.holder) ?? h.owner}×${h.permits === MAX_PERMITS ? 'all' : h.permits}`).join(' '))],
]
const LEADER_COLUMNS = [
  ['ELECTION', (r) => r.name],
  ['LEADER', (r) => (r.owner === null ? UNKNOWN : holderText(r.holder) ?? r.owner)],
  ['TERM', (r) => r.term ?? UNKNOWN],
  ['LEASE LEFT', (r) => seconds(r.leaseMs)],
]

/** A past time as top shows it: how long ago, from the frame's time. */
const ago = (at, ms) => (ms === null ? UNKNOWN : `${seconds(Math.max(0, at - ms))} ago`)
/** A coming time: in how long (or how long overdue). */
const until = (at, ms) => (ms === null ? UNKNOWN : ms >= at ? `in ${seconds(ms - at)}` : `${seconds(at - ms)} overdue`)
/** Columns of the jobs table, as [header, (row, frame time) → text]. */
const JOB_COLUMNS = [
  ['JOB', (r) => r.name],
  ['LAST RUN', (r) => r.outcome + (r.error === null ? '' : ` (${r.error.code ?? r.error.name})`)],
  ['STARTED', (r, at) => ago(at, r.startedAt)],
  ['TOOK', (r) => (r.durationMs === null ? UNKNOWN : seconds(r.durationMs))],
  ['RAN BY', (r) => holderText(r.holder) ?? r.owner ?? UNKNOWN],
  ['NEXT DUE', (r, at) => until(at, r.nextDue)],
]

function table(columns, rows, width) {
  // Names, owners and hosts come from other processes: shown escaped, never sent raw.
  const cells = rows.map((r) => columns.map(([, f]) => visible(f(r))))
  const widths = columns.map(([h], c) => Math.max(h.length, ...cells.map((r) => r[c].length)))
  const line = (r) => {
    const s = r.map((cell, c) => cell.padEnd(widths[c])).join('  ').trimEnd()
    return width > 0 && s.length > width ? `${s.slice(0, width - 1)}…` : s
  }
  return [line(columns.map(([h]) => h)), ...cells.map(line)].join('\n')
}

/** The text of one frame of `top` (`where`: the store, password masked; `width`: 0 for any). */
function renderFrame(frame, where, width = 0) {
  const time = new Date(frame.at).toISOString().slice(11, 19)
  const out = [`deadbolt top  ${visible(where)}${frame.prefix ? `  prefix ${jsonLine(frame.prefix)}` : ''}  ${time} UTC`, '']
  out.push(`LOCKS (${frame.more ? `${frame.locks.length} shown; more are held: --limit shows more` : frame.locks.length})`)
  out.push(frame.locks.length === 0 ? '  no held locks' : table(LOCK_COLUMNS, frame.locks, width))
  if (frame.semaphores.length > 0) out.push('', `SEMAPHORES (${frame.semaphores.length})`, table(SEMAPHORE_COLUMNS, frame.semaphores, width))
  if (frame.leaders.length > 0) out.push('', `LEADERS (${frame.leaders.length})`, table(LEADER_COLUMNS, frame.leaders, width))
  if (frame.jobs.length > 0) {
    const columns = JOB_COLUMNS.map(([h, f]) => [h, (r) => f(r, frame.at)])
    out.push('', `JOBS (${frame.jobs.length})`, table(columns, frame.jobs, width))
  }
  return out.join('\n')
}

module.exports = { Sightings, readFrame, listSome, renderFrame, parseSemaphore, UNKNOWN, seconds, MAX_LIMIT }
