'use strict'
// What deadbolt leaves to the garbage collector: an operation's objects die young (in the
// young generation) even when the process's heap is large, so scavenges stay cheap. V8's
// own trace of every GC (`--trace-gc-nvp`) says how many bytes each scavenge promoted to the
// old generation; a library whose per-operation objects outlive scavenges promotes megabytes
// at every one (see lib/id-map.js).

const { test } = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const { spawn } = require('node:child_process')
const { REDIS_URL, needRedis, prefix } = require('./helpers')

const CHURN = path.join(__dirname, 'fixtures', 'churn.js')

/** Bytes promoted by the scavenges of the measured pairs (and how many scavenges ran). */
function promotedWhileChurning(face, url) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--trace-gc-nvp', CHURN, face, url, prefix('gc')], { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => { out += d })
    child.stderr.on('data', (d) => { err += d })
    child.on('error', reject)
    child.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`churn.js exited with ${code}: ${err}`))
      const measured = out.slice(out.indexOf('START\n'), out.indexOf('END\n'))
      let promoted = 0
      let scavenges = 0
      for (const line of measured.split('\n')) {
        if (!/\bgc=s\b/.test(line)) continue
        scavenges++
        promoted += Number(/\bpromoted=(\d+)/.exec(line)?.[1] ?? 0)
      }
      resolve({ promoted, scavenges })
    })
  })
}

// 60 000 pairs allocate well over 10 MB of young objects, so several scavenges run while they
// do. Before lib/id-map.js each of them promoted ~3.7 MB (60 000 pairs: over 100 MB); what may
// legitimately survive is what is in flight at a scavenge (10 operations) and the odd table.
const BOUND = 2 << 20

test('an operation leaves nothing for the old generation when the heap is large (memory store)', async () => {
  const { promoted, scavenges } = await promotedWhileChurning('modern', 'memory://')
  assert.ok(scavenges >= 3, `only ${scavenges} scavenges ran: the run measures nothing`)
  assert.ok(promoted < BOUND, `${scavenges} scavenges promoted ${promoted} bytes`)
})

test('an operation leaves nothing for the old generation when the heap is large (Redis)', async (t) => {
  if (!(await needRedis(t))) return
  const { promoted, scavenges } = await promotedWhileChurning('modern', REDIS_URL)
  assert.ok(scavenges >= 3, `only ${scavenges} scavenges ran: the run measures nothing`)
  assert.ok(promoted < BOUND, `${scavenges} scavenges promoted ${promoted} bytes`)
})

test('the redislock face leaves nothing for the old generation either', async (t) => {
  if (!(await needRedis(t))) return
  const { promoted, scavenges } = await promotedWhileChurning('redislock', REDIS_URL)
  assert.ok(scavenges >= 3, `only ${scavenges} scavenges ran: the run measures nothing`)
  assert.ok(promoted < BOUND, `${scavenges} scavenges promoted ${promoted} bytes`)
})
