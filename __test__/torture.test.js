'use strict'
// The short form of the torture suite (torture/): every scenario against every store, one
// test each, failing on any violated invariant. `npm run torture` runs the full form.
// A scenario whose server is missing fails under CI and is skipped elsewhere.

const { test, after } = require('node:test')
const { STORES } = require('../torture/stores')
const { SCENARIOS, applies } = require('../torture/scenarios')
const { runScenario, disposeReusable, line } = require('../torture/run')

after(disposeReusable)

for (const store of STORES) {
  for (const sc of SCENARIOS) {
    if (!applies(sc, store)) continue
    test(`${store.name}: ${sc.title}`, { timeout: 180_000 }, async (t) => {
      const r = await runScenario(store, sc, { short: true })
      t.diagnostic(line(r))
      for (const n of r.notes) t.diagnostic(n)
      if (r.status === 'skip') return t.skip(r.reason)
      if (r.status === 'fail') throw new Error(`${r.violations.length} violated invariant(s):\n  - ${r.violations.join('\n  - ')}`)
    })
  }
}

test('the torture checker counts overlaps, stale writes and token violations in a crafted log', () => {
  const assert = require('node:assert/strict')
  const { overlaps, staleAccepted, tokenViolations } = require('../torture/checker')
  const w = (w, g, t, held, key = 'k', token = String(g)) => ({ ev: 'write', w, g, t, held, key, token })
  // A holds 0..10; B believes it holds from 5: one overlap of 5 ms. C after A stopped: none.
  const ov = overlaps([w('A', 1, 0, true), w('A', 1, 10, true), w('B', 2, 5, true), w('B', 2, 12, true), w('A', 1, 11, false), w('C', 3, 20, true)])
  assert.equal(ov.count, 1)
  assert.equal(ov.maxMs, 5)
  // A read is known only to lie between t0 (before it) and t (after it). A's last read may
  // have happened at 4, before B's first (A was descheduled before logging it at 6): no
  // overlap for sure. B read at 7 at the latest while A read at 9 at the earliest: one.
  const r2 = (w, g, t0, t, held = true) => ({ ev: 'write', w, g, t0, t, held, key: 'k', token: String(g) })
  assert.equal(overlaps([r2('A', 1, 0, 1), r2('A', 1, 4, 6), r2('B', 2, 5, 5.5), r2('B', 2, 8, 9)]).count, 0)
  const sure = overlaps([r2('A', 1, 0, 1), r2('A', 1, 9, 10), r2('B', 2, 6, 7), r2('B', 2, 12, 13)])
  assert.equal(sure.count, 1)
  assert.equal(sure.maxMs, 2)
  const r = (w, token, accepted, t) => ({ w, key: 'k', token: BigInt(token), accepted, t })
  assert.equal(staleAccepted([r('A', 1, true, 0), r('B', 2, true, 1), r('A', 1, true, 2)]).stale, 1)
  assert.equal(staleAccepted([r('A', 1, true, 0), r('B', 1, true, 1)]).stale, 1, 'one token accepted from two writers')
  assert.equal(staleAccepted([r('A', 1, true, 0), r('B', 2, true, 1), r('A', 1, false, 2)]).stale, 0)
  const g = (w, token, t) => ({ ev: 'acquire', w, key: 'k', token: String(token), t })
  const rel = (w, token, t) => ({ ev: 'release', w, key: 'k', token: String(token), ok: true, t })
  assert.equal(tokenViolations([g('A', 1, 0), rel('A', 1, 1), g('B', 2, 2)]).violations, 0)
  assert.equal(tokenViolations([g('A', 1, 0), g('B', 1, 2)]).violations, 1, 'a duplicate')
  assert.equal(tokenViolations([g('A', 5, 0), rel('A', 5, 1), g('B', 3, 2)]).violations, 1, 'a decrease')
  assert.equal(tokenViolations([g('A', 5, 0), rel('A', 5, 1), g('B', 1, 3)], [2]).violations, 0, 'a new epoch')
})
