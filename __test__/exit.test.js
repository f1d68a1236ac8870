'use strict'
// What a process leaves when it ends without close(): what it holds is released on its way
// out, whether its event loop emptied, it called process.exit() or an exception ended it; a
// store that does not answer holds the exit up for at most the addon's bound (1 s).

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { connect } = require('..')
const { REDIS_URL, MYSQL_URL, PG_URL, needRedis, needMysql, needPg, prefix } = require('./helpers')
const { freezableProxy } = require('../torture/proxy')

const CHILD = path.join(__dirname, 'fixtures', 'exit-child.js')
const DIR = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-exit-'))
test.after(() => fs.rmSync(DIR, { recursive: true, force: true }))

/** Runs the child to its end; resolves with its exit code, and when it said `held` and ended (ms after). */
function runChild(env, { onHeld } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CHILD], { env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    let exitAsked = null
    child.stdout.on('data', async (d) => {
      out += d
      if (out.includes('held') && onHeld && exitAsked === null) {
        await onHeld()
        exitAsked = process.hrtime.bigint()
        child.stdin.write('exit\n')
      }
    })
    child.stderr.on('data', (d) => { err += d })
    child.on('error', reject)
    child.on('exit', (code) => {
      const elapsedMs = exitAsked === null ? null : Number(process.hrtime.bigint() - exitAsked) / 1e6
      resolve({ code, held: out.includes('held'), err, elapsedMs })
    })
  })
}

const STORES = [
  { name: 'Redis', url: REDIS_URL, need: needRedis },
  { name: 'MySQL', url: MYSQL_URL, need: needMysql },
  { name: 'PostgreSQL', url: PG_URL, need: needPg },
  { name: 'SQLite', url: `sqlite://${path.join(DIR, 'locks.db')}`, need: async () => true },
]

for (const store of STORES) {
  for (const [exit, how] of [['empty', 'its event loop empties'], ['exit', 'it calls process.exit()'], ['throw', 'an uncaught exception ends it']]) {
    for (const autoExtend of [false, true]) {
      test(`on ${store.name}, a process that ends because ${how} releases its ${autoExtend ? 'auto-extended ' : ''}lock on its way out`, async (t) => {
        if (!(await store.need(t))) return
        const key = prefix('exit') + 'k'
        const r = await runChild({ URL: store.url, KEY: key, EXIT: exit, AUTO_EXTEND: autoExtend ? '1' : '0' })
        assert.ok(r.held, r.err)
        assert.equal(r.code, exit === 'throw' ? 1 : 0)
        const locks = await connect(store.url)
        try {
          assert.equal(await locks.inspect(key), null)
        } finally {
          await locks.close()
        }
      })
    }
  }
}

test('a process whose Redis stops answering ends within the bound and leaves its lock to its ttl', async (t) => {
  if (!(await needRedis(t))) return
  const proxy = await freezableProxy(Number(new URL(REDIS_URL).port) || 6379)
  try {
    const key = prefix('exit') + 'silent'
    const r = await runChild(
      { URL: `redis://127.0.0.1:${proxy.port}`, KEY: key, EXIT: 'stdin-exit', AUTO_EXTEND: '1' },
      { onHeld: () => proxy.freeze() },
    )
    assert.ok(r.held, r.err)
    assert.equal(r.code, 0)
    // The bound is the promise: 1 s of waiting for the store, plus the child's own exit.
    assert.ok(r.elapsedMs < 1_000 + 2_000, `the process took ${r.elapsedMs} ms to end`)
    const locks = await connect(REDIS_URL)
    try {
      const info = await locks.inspect(key)
      assert.notEqual(info, null)
      await locks.forceRelease(key)
    } finally {
      await locks.close()
    }
  } finally {
    await proxy.close()
  }
})
