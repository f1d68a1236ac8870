'use strict'
// The README's demo: two workers share one lock on Redis (or, with no Redis, the
// embedded memory:// store). Run it with `npm run demo` (or `node examples/demo.js URL`).

const { connect, createLock } = require('..')

const url = process.argv[2] || process.env.DEADBOLT_URL || 'redis://127.0.0.1:6379'

async function worker(locks, name, log) {
  for (let i = 0; i < 3; i++) {
    // Waits up to 5 s; the lease is kept alive in the background while we work.
    await locks.withLock('demo:report', { ttl: 2000, wait: 5000 }, async (lock) => {
      log(`${name} holds the lock (fencing token ${lock.fencingToken})`)
      await new Promise((r) => setTimeout(r, 50))
    })
  }
}

async function main() {
  let locks
  let onRedis = url.startsWith('redis')
  try {
    locks = await connect(url, { connectTimeout: 2000 })
  } catch (err) {
    console.log(`No store at ${url} (${err.cause?.message ?? err.message}); using the embedded memory:// store`)
    locks = await connect('memory://demo')
    onRedis = false
  }
  const log = (s) => console.log(`[${new Date().toISOString().slice(11, 23)}] ${s}`)
  await Promise.all([worker(locks, 'worker A', log), worker(locks, 'worker B', log)])

  const info = await locks.inspect('demo:report')
  log(`after the work, the lock is ${info === null ? 'free' : `held by ${info.owner}`}`)

  const election = locks.elect('demo:leader', { ttl: 1000, data: 'demo-host', onElected: (l) => log(`elected leader, term ${l.fencingToken}`) })
  await new Promise((r) => setTimeout(r, 100))
  log(`leader record: ${JSON.stringify((await locks.leader('demo:leader'))?.data)}`)
  await election.resign()

  if (onRedis) {
    // The redislock face: the same calls a redislock user already makes.
    const lock = createLock(url, { timeout: 1000, retries: 3, delay: 20 })
    await lock.acquire('demo:legacy')
    log(`redislock-style lock acquired, id ${lock._id}`)
    await lock.release()
  }
  await locks.close()
  log('done')
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
