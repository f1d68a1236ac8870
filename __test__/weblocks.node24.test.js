'use strict'
// The Web Locks scenarios (weblocks.scenarios.js) under Node 24, which scripts/node24.js
// fetches into .cache/node24 (the Node that runs this suite may have no navigator.locks):
// against Node's own navigator.locks, to show that Node and deadbolt answer alike (but where
// Node departs from the specification: nodeDivergences), and with deadbolt on the memory
// store and on Redis, to show that deadbolt answers alike under this Node and Node 24 (the
// addon is Node-API: Node 24 loads the same build). Each run is a child process that prints
// one line per scenario (fixtures/weblocks-scenarios.js); each scenario is one test here.

const { describe, test, before } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const path = require('node:path')
const node24 = require('../scripts/node24')
const { scenarios, nodeDivergences } = require('./weblocks.scenarios')
const { REDIS_URL, answers, needRedis, prefix } = require('./helpers')

const FIXTURE = path.join(__dirname, 'fixtures', 'weblocks-scenarios.js')
const bin = node24.binary()
const why = node24.unsupported()
const missing = bin === null && (why !== null
  ? `Node ${node24.VERSION} cannot run here (${why}): the comparison with Node's navigator.locks is skipped`
  : `Node ${node24.VERSION} is not in .cache/node24: run \`node scripts/node24.js\` (npm test does)`)
// Missing where the package exists: a failure under CI, skipped with the message elsewhere.
const skip = missing && !(process.env.CI && why === null) ? missing : false

/** Runs every scenario in a child `execPath` against `target`: Map title → { ok, error }. */
function runScenarios(execPath, target) {
  if (execPath === null) return Promise.reject(new Error(missing))
  return new Promise((resolve, reject) => {
    const proc = spawn(execPath, [FIXTURE, target, prefix('node24-web')], { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    proc.stdout.setEncoding('utf8').on('data', (d) => { out += d })
    proc.stderr.setEncoding('utf8').on('data', (d) => { err += d })
    proc.once('error', reject)
    proc.once('close', (code) => {
      if (code !== 0) return reject(new Error(`${path.basename(execPath)} ${target} exited with ${code}: ${err}`))
      resolve(new Map(out.split('\n').filter(Boolean).map((line) => JSON.parse(line)).map((r) => [r.title, r])))
    })
  })
}

/** Runs once, when a test first asks. */
function once(fn) {
  let p = null
  return () => (p ??= fn())
}

const outcome = (r) => (r.ok ? 'passes' : `fails: ${r.error.name}: ${r.error.message}`)

/** Each scenario's answer in `results()`: passes, or fails as `divergences` says it does. */
function scenarioTests(results, divergences = new Map(), ready = async () => true) {
  for (const [title] of scenarios) {
    const diverges = divergences.get(title)
    test(diverges === undefined ? title : `${title} (where Node departs from the specification)`, async (t) => {
      if (!(await ready(t))) return
      const r = (await results()).get(title)
      assert.ok(r, 'the run reported this scenario')
      if (diverges === undefined) return assert.ok(r.ok, outcome(r))
      t.diagnostic(diverges)
      assert.equal(r.ok, false, `Node now answers as the specification says: take this scenario out of nodeDivergences (${diverges})`)
    })
  }
}

describe(`the Web Locks scenarios under Node ${node24.VERSION}`, { skip }, () => {
  const memory = 'memory://weblocks-node24'
  const nodeRun = once(() => runScenarios(bin, 'node'))
  const memoryRun = once(() => runScenarios(bin, memory))
  const redisRun = once(() => runScenarios(bin, REDIS_URL))
  let redisUp = false
  before(async () => { redisUp = await answers(6379) })
  const needRedisUp = async (t) => redisUp || needRedis(t)

  describe('Node\'s own navigator.locks', () => {
    scenarioTests(nodeRun, nodeDivergences)
  })

  describe('deadbolt on the memory store', () => {
    scenarioTests(memoryRun)
  })

  describe('deadbolt on Redis', () => {
    scenarioTests(redisRun, undefined, needRedisUp)
  })

  test('Node\'s navigator.locks and deadbolt answer every scenario alike but the known departures', async () => {
    const [node, deadbolt] = await Promise.all([nodeRun(), memoryRun()])
    const differ = scenarios.map(([title]) => title).filter((title) => node.get(title)?.ok !== deadbolt.get(title)?.ok)
    assert.deepEqual(differ, scenarios.map(([title]) => title).filter((title) => nodeDivergences.has(title)))
  })

  const sameAnswers = (store, url, run, ready = async () => true) =>
    test(`deadbolt on ${store} answers every scenario under Node ${process.versions.node} as under Node ${node24.VERSION}`, async (t) => {
      if (!(await ready(t))) return
      const [here, there] = await Promise.all([runScenarios(process.execPath, url), run()])
      const answersOf = (results) => scenarios.map(([title]) => [title, results.has(title) ? outcome(results.get(title)) : 'not reported'])
      assert.deepEqual(answersOf(here), answersOf(there))
    })
  sameAnswers('the memory store', memory, memoryRun)
  sameAnswers('Redis', REDIS_URL, redisRun, needRedisUp)
})
