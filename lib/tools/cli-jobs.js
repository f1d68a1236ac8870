'use strict'
// `deadbolt jobs <url> [prefix]`: the last run of each scheduled job, as recorded in the store
// (lib/jobs.js). Kept apart from lib/tools/cli.js, which only routes the command here.

const { holderText } = require('../identity')
const { visible, jsonLine } = require('./printable')

const HELP = `Usage: deadbolt jobs <url> [prefix] [--limit N] [--json]
Prints the last run of each scheduled job (whose names start with prefix): outcome, when it
started, how long it ran, who ran it (host/pid/name), its fencing token and when it is next due.
Exit 1 if there is none.`

/** A time as the table shows it (ISO, to the second), or –. */
function at(ms) {
  return ms === null ? '–' : new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z')
}

function tableOf(runs) {
  const head = ['JOB', 'OUTCOME', 'STARTED', 'DURATION MS', 'RAN BY', 'TOKEN', 'NEXT DUE']
  // Names and holders come from other processes: shown escaped, never sent raw.
  const body = runs.map((r) => [
    r.name,
    r.outcome + (r.error === null ? '' : ` (${r.error.code ?? r.error.name})`),
    at(r.startedAt),
    r.durationMs === null ? '–' : String(r.durationMs),
    holderText(r.holder) ?? r.owner ?? '–',
    r.fencingToken === null ? '–' : String(r.fencingToken),
    at(r.nextDue),
  ].map(visible))
  const widths = head.map((h, c) => Math.max(h.length, ...body.map((row) => row[c].length)))
  return [head, ...body].map((row) => row.map((cell, c) => cell.padEnd(widths[c])).join('  ').trimEnd()).join('\n')
}

/** The command: (locks, [prefix], flags, io) → exit code (0, or 1 when no job is recorded). */
async function command(locks, [prefix = ''], flags, io) {
  const runs = await locks.jobs({ prefix, limit: flags.limit ?? 1000 })
  if (flags.json) io.out(jsonLine(runs))
  else io.out(runs.length === 0 ? 'no job has run' : tableOf(runs))
  return runs.length === 0 ? 1 : 0
}

module.exports = { command, HELP }
