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
// do. Before lib/id-map.js each of them promoted ~3.7 MB (these runs: 33–51 MB in all; now
// ~60 KB); what may legitimately survive is what is in flight at a scavenge (10 operations)
// and the odd table.
const BOUND = 2 << 20

for (const { name, face, url, need } of [
  { name: 'an operation leaves nothing for the old generation when the heap is large (memory store)', face: 'modern', url: 'memory://', need: async () => true },
  { name: 'an operation leaves nothing for the old generation when the heap is large (Redis)', face: 'modern', url: REDIS_URL, need: needRedis },
  { name: 'the redislock face leaves nothing for the old generation either', face: 'redislock', url: REDIS_URL, need: needRedis },
  // deadbolt/otel kept its open spans in `Map`s keyed by contexts and locks: 20 000 pairs
  // promoted ~49 MB (bench/PROFILE.md).
  { name: 'deadbolt/otel leaves nothing of an operation for the old generation either', face: 'otel', url: REDIS_URL, need: needRedis },
]) {
  test(name, async (t) => {
    if (!(await need(t))) return
    const { promoted, scavenges } = await promotedWhileChurning(face, url)
    assert.ok(scavenges >= 3, `only ${scavenges} scavenges ran: the run measures nothing`)
    assert.ok(promoted < BOUND, `${scavenges} scavenges promoted ${promoted} bytes`)
  })
}
