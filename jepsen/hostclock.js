'use strict'
// Watches the host's wall clock against its monotonic clock while a schedule runs. The
// checker measures every hold on the monotonic clock, but most stores' leases run on the wall
// clock (Redis's TIME, the SQL servers' clocks; not etcd's lease timers, nor DynamoDB's
// watched versions), and every throwaway server shares the host's. A step of that clock (a
// correction by the host's time service) moves every server's leases at once: a forward step
// ends them early on all servers together, which no Redlock quorum absorbs (its servers are
// assumed to keep time independently). So the harness looks for steps itself and records
// each as a fault it found, not one it made.
//
// A sample reads the monotonic clock, the wall clock and the monotonic clock again; one whose
// two monotonic reads are more than READ_MS apart (the process was preempted between them,
// as it can be at a load of 30) is discarded. Consecutive offsets (wall − monotonic) of kept
// samples that differ by more than STEP_MS are a step, made between the two samples:
// Date.now() has 1 ms resolution, and a time service slewing at its fastest (500 ppm) moves
// the offset by 0.025 ms per sample.

const EVERY_MS = 50
const READ_MS = 1
const STEP_MS = 3

class HostClockWatch {
  /**
   * `mono()`: the harness's monotonic clock (ms); `wall()`: the wall clock (ms since the
   * epoch). Both injectable, for the checker's own tests.
   */
  constructor(mono, wall = Date.now, everyMs = EVERY_MS) {
    this.mono = mono
    this.wall = wall
    this.everyMs = everyMs
    /** The last kept sample: { t (monotonic ms), offset (wall − monotonic) }. */
    this.last = null
    this.timer = null
    /**
     * The steps seen: { from, t } (monotonic ms: the kept samples before and after it) and
     * ms (how far the wall clock moved beyond the monotonic one).
     */
    this.steps = []
  }

  /** Takes one sample; records a step against the previous kept one. */
  sample() {
    const before = this.mono()
    const wall = this.wall()
    const after = this.mono()
    if (after - before > READ_MS) return
    const offset = wall - (before + after) / 2
    if (this.last !== null && Math.abs(offset - this.last.offset) > STEP_MS) {
      this.steps.push({ from: this.last.t, t: after, ms: Math.round(offset - this.last.offset) })
    }
    this.last = { t: after, offset }
  }

  /** Samples every `everyMs` until stopped; never keeps the process alive. */
  start() {
    this.sample()
    this.timer = setInterval(() => this.sample(), this.everyMs)
    this.timer.unref()
    return this
  }

  /** Stops sampling (after a last sample) and returns the steps seen. */
  stop() {
    if (this.timer !== null) clearInterval(this.timer)
    this.timer = null
    this.sample()
    return this.steps
  }
}

module.exports = { HostClockWatch }
