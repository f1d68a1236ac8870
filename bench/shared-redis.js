'use strict'
// What a listing costs on a Redis that other applications share (`node bench/shared-redis.js`):
// a throwaway server filled with FOREIGN other keys (strings from DEBUG POPULATE, plus as many
// hashes) and 10 held locks; for `list` with and without a prefix, the wall time (median of
// RUNS) and the commands the server ran for one listing (INFO commandstats, before and after).
// `top` and the dashboard make one such listing per refresh.
const Redis = require('ioredis')
const { connect } = require('..')
const { startRedis } = require('../__test__/fixtures/redis-server')

const FOREIGN = Number(process.env.FOREIGN ?? 1_000_000)
const RUNS = Number(process.env.RUNS ?? 3)

/** The server's per-command call counts. */
async function calls(raw) {
  const out = {}
  for (const m of (await raw.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) out[m[1]] = Number(m[2])
  return out
}

async function main() {
  const server = await startRedis(undefined, ['--enable-debug-command', 'yes'])
  const raw = new Redis(server.url)
  try {
    await raw.call('DEBUG', 'POPULATE', String(FOREIGN / 2), 'app:string')
    for (let i = 0; i < FOREIGN / 2; i += 10_000) {
      const pipe = raw.pipeline()
      for (let j = i; j < Math.min(i + 10_000, FOREIGN / 2); j++) pipe.hset(`app:hash:${j}`, 'f', 'v')
      await pipe.exec()
    }
    const locks = await connect(server.url)
    const held = []
    for (let i = 0; i < 10; i++) held.push(await locks.acquire(`lk:${i}`, { ttl: 600_000 }))
    console.log(`${await raw.dbsize()} keys: ${FOREIGN} foreign (half strings, half hashes), 10 locks`)
    for (const p of ['lk:', '']) {
      const times = []
      let commands = null
      for (let r = 0; r < RUNS; r++) {
        const before = await calls(raw)
        const t0 = process.hrtime.bigint()
        const listed = await locks.list(p, { limit: 100 })
        times.push(Number(process.hrtime.bigint() - t0) / 1e6)
        const after = await calls(raw)
        if (listed.length !== 10) throw new Error(`listed ${listed.length}, not 10`)
        commands = Object.fromEntries(Object.keys(after).map((c) => [c, after[c] - (before[c] ?? 0)]).filter(([c, n]) => n > 0 && c !== 'info'))
      }
      times.sort((a, b) => a - b)
      console.log(`list(${JSON.stringify(p)}): median ${times[Math.floor(times.length / 2)].toFixed(0)} ms over ${RUNS} runs; commands: ${JSON.stringify(commands)}`)
    }
    for (const l of held) await l.release()
    await locks.close()
  } finally {
    raw.disconnect()
    await server.kill()
  }
}

main().catch((err) => { console.error(err); process.exitCode = 1 })
