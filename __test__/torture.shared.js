'use strict'
// The short form of the torture suite (torture/), split into parts so that `npm test` can run
// them two at a time (one file held one of its two lanes for 2½ minutes, at the end of the
// alphabet, while the other lane had run out of files). Each part is a spec file
// (`torture.<part>.test.js`); `torture.checker.test.js` checks that every scenario on every
// store belongs to exactly one part. `npm run torture` runs the full form.
// A scenario whose server is missing fails under CI and is skipped elsewhere.

const { test, after } = require('node:test')
const { STORES } = require('../torture/stores')
const { SCENARIOS, applies } = require('../torture/scenarios')
const { FAILOVER_SCENARIOS } = require('../torture/failover')
const { runScenario, disposeReusable, line } = require('../torture/run')

const failover = new Set(FAILOVER_SCENARIOS.map((sc) => sc.name))

/** Which part runs scenario `sc` on `store`. */
function partOf(store, sc) {
  if (store.name === 'redis' && failover.has(sc.name)) return 'failover'
  return store.name
}

/** Every (store, scenario) the short form runs, with its part. */
function cases() {
  const out = []
  for (const store of STORES) {
    for (const sc of SCENARIOS) if (applies(sc, store)) out.push({ store, sc, part: partOf(store, sc) })
  }
  return out
}

/** Registers the tests of `part`: one per scenario and store, failing on any violation. */
function tortureTests(part) {
  after(disposeReusable)
  for (const { store, sc } of cases().filter((c) => c.part === part)) {
    test(`${store.name}: ${sc.title}`, { timeout: 180_000 }, async (t) => {
      const r = await runScenario(store, sc, { short: true })
      t.diagnostic(line(r))
      for (const n of r.notes) t.diagnostic(n)
      if (r.status === 'skip') return t.skip(r.reason)
      if (r.status === 'fail') throw new Error(`${r.violations.length} violated invariant(s):\n  - ${r.violations.join('\n  - ')}`)
    })
  }
}

module.exports = { tortureTests, cases }
