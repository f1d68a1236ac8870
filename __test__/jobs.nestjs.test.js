'use strict'
// docs/jobs.md's recipe for @nestjs/schedule: two Nest application contexts (two replicas of
// one service, each with its own deadbolt client on the shared Redis) schedule the same
// every-second @Cron method. Wrapped by the documented RunOnce decorator, each tick runs once
// across both; without it, both run it. The decorators are applied as functions, in the order
// TypeScript applies them (bottom-up: RunOnce, then Cron), so that no compile step is needed.

require('reflect-metadata')
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { Injectable, Inject, Module } = require('@nestjs/common')
const { NestFactory } = require('@nestjs/core')
const { Cron, ScheduleModule } = require('@nestjs/schedule')
const { connect } = require('..')
const { RunOnce } = require('../examples/nestjs-run-once')
const { REDIS_URL, prefix, needRedis } = require('./helpers')

const LOCKS = 'DEADBOLT_LOCKS'

/**
 * One replica: a module with a provider whose `tick` method is an every-second @Cron,
 * wrapped by RunOnce when `wrap`. `onRun(replica)` is called from the method's body.
 */
function replicaModule(locks, { job, wrap, replica, onRun }) {
  class Reports {
    constructor(locksClient) { this.locks = locksClient }
    async tick() { onRun(replica) }
  }
  Inject(LOCKS)(Reports, undefined, 0)
  Injectable()(Reports)
  const descriptor = Object.getOwnPropertyDescriptor(Reports.prototype, 'tick')
  if (wrap) RunOnce(job, { atMostFor: 5_000 })(Reports.prototype, 'tick', descriptor)
  Cron('* * * * * *')(Reports.prototype, 'tick', descriptor)
  Object.defineProperty(Reports.prototype, 'tick', descriptor)

  class AppModule {}
  Module({
    imports: [ScheduleModule.forRoot()],
    providers: [Reports, { provide: LOCKS, useValue: locks }],
  })(AppModule)
  return AppModule
}

/**
 * Boots two replicas and resolves once `enough(state)` holds, then closes them.
 * state: `bodies` (each body run: { replica, second }) and `attempts` (each runOnce call the
 * decorator made: { replica, tick, ran }).
 */
async function twoReplicas({ wrap, enough }) {
  const job = prefix('nest-job')
  const state = { bodies: [], attempts: [] }
  let done
  const finished = new Promise((resolve) => { done = resolve })
  const check = () => { if (enough(state)) done() }
  const apps = []
  const clients = []
  try {
    for (const replica of ['a', 'b']) {
      const locks = await connect(REDIS_URL, { name: `nest-${replica}` })
      clients.push(locks)
      // Watch the decorator's calls: which tick it named, and whether this replica ran it.
      const runOnce = locks.runOnce.bind(locks)
      locks.runOnce = async (name, fn, options) => {
        const res = await runOnce(name, fn, options)
        state.attempts.push({ replica, tick: options.tick, ran: res.ran })
        check()
        return res
      }
      const onRun = (who) => {
        state.bodies.push({ replica: who, second: Math.round(Date.now() / 1000) * 1000 })
        check()
      }
      const AppModule = replicaModule(locks, { job, wrap, replica, onRun })
      apps.push(await NestFactory.createApplicationContext(AppModule, { logger: false }))
    }
    await finished
  } finally {
    for (const app of apps) await app.close()
    for (const locks of clients) await locks.close()
  }
  return state
}

const count = (list, pred) => list.filter(pred).length

test('an @Cron method wrapped by RunOnce runs each tick once across two Nest contexts', { timeout: 60_000 }, async (t) => {
  if (!(await needRedis(t))) return
  const { bodies, attempts } = await twoReplicas({
    wrap: true,
    // Three ticks ran, and both replicas fired at least twice (so both were competing); or
    // the body ran six times, which it does not unless something runs it outside runOnce.
    enough: (s) => s.bodies.length >= 6 || (count(s.attempts, (a) => a.ran) >= 3 &&
      count(s.attempts, (a) => a.replica === 'a') >= 2 && count(s.attempts, (a) => a.replica === 'b') >= 2),
  })
  const ran = attempts.filter((a) => a.ran)
  const ticks = ran.map((a) => a.tick)
  assert.equal(new Set(ticks).size, ticks.length, `a tick ran twice: ${JSON.stringify(ran)}`)
  assert.equal(bodies.length, ran.length, 'the method body ran exactly when runOnce ran it')
})

test('without RunOnce both Nest contexts run the @Cron method on the same tick', { timeout: 60_000 }, async (t) => {
  if (!(await needRedis(t))) return
  const { bodies, attempts } = await twoReplicas({
    wrap: false,
    enough: (s) => count(s.bodies, (b) => b.replica === 'a') >= 3 && count(s.bodies, (b) => b.replica === 'b') >= 3,
  })
  assert.equal(attempts.length, 0)
  const seconds = bodies.map((b) => b.second)
  assert.notEqual(new Set(seconds).size, seconds.length, `no tick ran on both: ${JSON.stringify(bodies)}`)
})

test('docs/jobs.md shows the RunOnce decorator this spec runs', () => {
  const doc = fs.readFileSync(path.join(__dirname, '..', 'docs', 'jobs.md'), 'utf8')
  const source = fs.readFileSync(path.join(__dirname, '..', 'examples', 'nestjs-run-once.js'), 'utf8')
  const fn = source.slice(source.indexOf('function RunOnce'), source.indexOf('\nmodule.exports'))
  assert.ok(fn.startsWith('function RunOnce') && fn.trim().endsWith('}'))
  assert.ok(doc.includes(fn.trim()), 'docs/jobs.md must show examples/nestjs-run-once.js\'s RunOnce verbatim')
})
