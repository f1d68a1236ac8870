'use strict'
// The README's demo. `npm run demo` with no URL runs the embedded default: three worker
// processes contend for one lock through a SQLite file in a temporary directory (no server),
// each writing to a shared journal that stands for the protected resource; then it prints
// the journal, checks that no two sections overlapped and that the fencing tokens only went
// up. With a URL (`npm run demo -- redis://127.0.0.1:6379`, or DEADBOLT_URL), two workers in
// this process share one lock on that store (or on the in-process memory:// store when the
// server does not answer), then an election and, on Redis, the redislock face.

const fs = require('fs')
const os = require('os')
const path = require('path')
const { spawn } = require('child_process')
const { connect, createLock } = require('..')

const KEY = 'demo:report'
const WORKERS = 3
const SECTIONS = 3

const log = (s) => console.log(`[${new Date().toISOString().slice(11, 23)}] ${s}`)

/** One worker process of the embedded demo: SECTIONS critical sections on KEY. */
async function workerProcess(url, name, dir) {
  const locks = await connect(url)
  const inside = path.join(dir, 'inside')
  for (let i = 0; i < SECTIONS; i++) {
    // Waits up to 10 s; the lease is kept alive in the background while we work.
    await locks.withLock(KEY, { ttl: 2000, wait: 10_000 }, async (lock) => {
      // Creating this file fails if another process is inside too: an overlap.
      let marker = null
      try {
        marker = fs.openSync(inside, 'wx')
      } catch {}
      log(`${name} (pid ${process.pid}) holds ${KEY}, fencing token ${lock.fencingToken}`)
      fs.appendFileSync(path.join(dir, 'journal'), `${JSON.stringify({ name, pid: process.pid, token: String(lock.fencingToken), overlap: marker === null })}\n`)
      await new Promise((resolve) => setTimeout(resolve, 50))
      if (marker !== null) {
        fs.closeSync(marker)
        fs.unlinkSync(inside)
      }
    })
  }
  await locks.close()
}

/** The embedded default: worker processes on a SQLite file, then what they did. */
async function embedded() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-demo-'))
  const url = `sqlite://${path.join(dir, 'locks.db')}`
  try {
    console.log(`No server URL given: ${WORKERS} worker processes share one lock through the SQLite file ${path.join(dir, 'locks.db')}`)
    const codes = await Promise.all(Array.from({ length: WORKERS }, (_, i) => {
      const child = spawn(process.execPath, [__filename, '--worker', url, `worker ${i + 1}`, dir], { stdio: 'inherit' })
      return new Promise((resolve) => child.on('exit', resolve))
    }))
    if (codes.some((c) => c !== 0)) throw new Error(`a worker failed (exit codes ${codes.join(', ')})`)

    const journal = fs.readFileSync(path.join(dir, 'journal'), 'utf8').trim().split('\n').map((l) => JSON.parse(l))
    console.log('\nThe journal, in the order the writes arrived:')
    journal.forEach((e, i) => console.log(`  ${String(i + 1).padStart(2)}. ${e.name} (pid ${e.pid})  fencing token ${e.token}`))
    const increasing = journal.every((e, i) => i === 0 || BigInt(e.token) > BigInt(journal[i - 1].token))
    const overlaps = journal.filter((e) => e.overlap).length
    const processes = new Set(journal.map((e) => e.pid)).size
    console.log(`${journal.length} critical sections by ${processes} processes: ${overlaps === 0 ? 'never two at once' : `${overlaps} OVERLAPS`}, fencing tokens ${increasing ? 'strictly increasing' : 'NOT increasing'}.`)
    if (overlaps !== 0 || !increasing) throw new Error('the lock failed')
    if (url.startsWith('sqlite:')) console.log('(A SQLite file counts tokens from the host clock in microseconds, so they are large.)')

    const locks = await connect(url)
    const info = await locks.inspect(KEY)
    log(`after the work, the lock is ${info === null ? 'free' : `held by ${info.owner}`}`)
    await election(locks)
    await locks.close()
    log('done (run `npm run demo -- redis://127.0.0.1:6379` to use a server instead)')
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

async function worker(locks, name) {
  for (let i = 0; i < SECTIONS; i++) {
    // Waits up to 5 s; the lease is kept alive in the background while we work.
    await locks.withLock(KEY, { ttl: 2000, wait: 5000 }, async (lock) => {
      log(`${name} holds the lock (fencing token ${lock.fencingToken})`)
      await new Promise((r) => setTimeout(r, 50))
    })
  }
}

async function election(locks) {
  const e = locks.elect('demo:leader', { ttl: 1000, data: 'demo-host', onElected: (l) => log(`elected leader, term ${l.fencingToken}`) })
  await new Promise((r) => setTimeout(r, 100))
  log(`leader record: ${JSON.stringify((await locks.leader('demo:leader'))?.data)}`)
  await e.resign()
}

/** With a URL: two workers in this process on that store (memory:// if it does not answer). */
async function onServer(url) {
  let locks
  let onRedis = url.startsWith('redis')
  try {
    locks = await connect(url, { connectTimeout: 2000 })
  } catch (err) {
    console.log(`No store at ${url} (${err.cause?.message ?? err.message}); using the embedded memory:// store`)
    locks = await connect('memory://demo')
    onRedis = false
  }
  await Promise.all([worker(locks, 'worker A'), worker(locks, 'worker B')])

  const info = await locks.inspect(KEY)
  log(`after the work, the lock is ${info === null ? 'free' : `held by ${info.owner}`}`)
  await election(locks)

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

const [arg, ...rest] = process.argv.slice(2)
const main = arg === '--worker'
  ? () => workerProcess(...rest)
  : () => {
      const url = arg || process.env.DEADBOLT_URL
      return url ? onServer(url) : embedded()
    }

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
