'use strict'
// The torture suite's own checks: its checker against crafted logs, and the short form's
// parts (torture.shared.js) covering every scenario on every store exactly once.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { cases } = require('./torture.shared')

test("every scenario on every store runs in exactly one of the short form's spec files", () => {
  const all = cases()
  assert.ok(all.length > 0)
  // Two cases with one name would make a title run twice and hide the other.
  assert.equal(new Set(all.map((c) => `${c.store.name}\u0000${c.sc.name}`)).size, all.length)
  const parts = new Set(all.map((c) => c.part))
  const files = fs.readdirSync(__dirname).filter((f) => /^torture\.\w+\.test\.js$/.test(f) && f !== path.basename(__filename))
  const ran = files.map((f) => /tortureTests\('(\w+)'\)/.exec(fs.readFileSync(path.join(__dirname, f), 'utf8'))?.[1])
  // Each part in one file named after it, and no file running a part that has no case.
  assert.deepEqual(ran.toSorted(), [...parts].toSorted())
  for (const [i, f] of files.entries()) assert.equal(f, `torture.${ran[i]}.test.js`)
})

test('the torture checker counts overlaps, stale writes and token violations in a crafted log', () => {
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
