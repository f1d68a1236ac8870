'use strict'
// docs/jobs.md's recipe for another scheduler: croner fires on every replica, and runOnce with
// the tick lets one of them run it.

const test = require('node:test')
const assert = require('node:assert/strict')
const { Cron } = require('croner')
const { connect } = require('..')
const { prefix } = require('./helpers')

test('croner on two replicas with runOnce runs each tick once', async (t) => {
  const store = `memory://recipes-${prefix('m')}`
  const name = prefix('croner')
  const ran = []
  let done
  const twoTicks = new Promise((resolve) => { done = resolve })
  const crons = []
  for (const replica of ['a', 'b']) {
    const locks = await connect(store)
    t.after(() => locks.close())
    crons.push(new Cron('* * * * * *', async (self) => {
      const tick = Math.round(self.currentRun().getTime() / 1000) * 1000
      const { ran: mine } = await locks.runOnce(name, () => {}, { tick })
      if (mine) ran.push({ replica, tick })
      if (new Set(ran.map((r) => r.tick)).size >= 2) done()
    }))
  }
  await twoTicks
  for (const cron of crons) cron.stop()
  const ticks = ran.map((r) => r.tick)
  assert.equal(new Set(ticks).size, ticks.length, `a tick ran twice: ${JSON.stringify(ran)}`)
})
