'use strict'
// A schedule: what the workload runs and which faults hit it when, all drawn from one seed
// (the same seed gives the same schedule). A fault is { kind, target, at, ms, ... }: `at` ms
// after the workload starts, lasting `ms`; several may overlap. `target` is a worker index,
// a server index, or 'all'.

const { prng } = require('./prng')

/** How long each kind lasts, by the lease `ttl`: pauses of holders run past the lease. */
function length(kind, r, ttl) {
  switch (kind) {
    case 'pause-holder': return r.int(Math.round(ttl * 1.2), Math.round(ttl * 2.5))
    case 'kill-holder': return r.int(200, 800) // until the worker is replaced
    case 'stall': return r.int(200, Math.round(ttl * 1.5))
    case 'net-reset': return r.int(100, 600)
    case 'net-latency': return r.int(300, 1500)
    case 'conn-kill': return 0
    case 'clock-jump': return 0 // the clock stays where it jumped
    default: return r.int(300, Math.round(ttl * 2))
  }
}

/**
 * The schedule of seed `seed` for an environment offering `kinds`, with `workers` workers,
 * `servers` servers, a run of `durationMs` and a lease of `ttl`.
 */
function schedule(seed, { kinds, workers, actors = workers, servers, durationMs, ttl, maxFaults = 4 }) {
  const r = prng(seed)
  const n = kinds.length === 0 ? 0 : r.int(1, maxFaults)
  const faults = []
  for (let i = 0; i < n; i++) {
    const kind = r.pick(kinds)
    const f = { kind, at: r.int(200, Math.max(300, durationMs - 800)), ms: length(kind, r, ttl) }
    if (kind === 'net-latency') f.delay = r.int(50, 600)
    if (['pause-holder', 'kill-holder', 'stall', 'net-cut-one'].includes(kind)) f.target = r.int(0, workers - 1)
    else if (kind.startsWith('net-')) f.target = r.chance(0.5) ? 'all' : r.int(0, workers - 1)
    else if (kind === 'store-pause' || kind === 'store-kill' || kind === 'failover' || kind === 'double-failover') f.target = r.int(0, Math.max(0, servers - 1))
    else if (kind === 'clock-jump') f.jump = r.int(Math.round(ttl / 2), ttl * 3) // forward, past the lease or not
    faults.push(f)
  }
  faults.sort((a, b) => a.at - b.at)
  return { seed, faults, actorSeeds: Array.from({ length: Math.max(workers, actors) }, () => r.seed()) }
}

module.exports = { schedule }
