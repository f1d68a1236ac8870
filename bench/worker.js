'use strict'
// One library, one scenario, one run, in a process of its own:
//   node --expose-gc bench/worker.js <lib> <scenario> '<json config>'
// Prints progress on stderr and exactly one line `RESULT {json}` on stdout, then exits (even if
// the library left timers or sockets behind). See bench/README.md for the scenarios.

const fs = require('node:fs')
const { LIBS, SETTINGS, loadedBuild } = require('./adapters')
const { config } = require('./config')
const { RedisProbe, MysqlProbe, PgProbe, FileProbe, DynaliteProbe } = require('./probes')
const { sleep, percentile, mean, parallel, withTimeout, cpuMicros } = require('./util')

const [libId, scenarioArg, cfgJson] = process.argv.slice(2)
const cfg = { ...config(process.env), ...JSON.parse(cfgJson || '{}') }
const scenario = Number(scenarioArg)
const spec = LIBS[libId]

let phase = 'start'
const warnings = []

function emit(result) {
  const build = loadedBuild()
  fs.writeSync(1, `RESULT ${JSON.stringify({ lib: libId, scenario, ...result, build: build ? build.id : undefined, warnings: warnings.length ? warnings.slice(0, 5) : undefined })}\n`)
  process.exit(0)
}

function note(msg) {
  if (warnings.length < 50) warnings.push(msg)
  process.stderr.write(`[${libId} s${scenario}] ${msg}\n`)
}

process.on('unhandledRejection', (err) => note(`unhandled rejection in ${phase}: ${err && err.message ? err.message : err}`))
process.on('uncaughtException', (err) => emit({ error: `uncaught exception in ${phase}: ${err && err.message ? err.message : err}` }))

// Our own watchdog, below run.js's hard kill: report where it hung.
setTimeout(() => emit({ error: `timed out in phase "${phase}" after ${Math.round((cfg.timeoutMs || 60000) / 1000)} s` }), Math.max(1000, (cfg.timeoutMs || 60000) - 3000))

const gc = () => {
  if (typeof global.gc === 'function') {
    global.gc()
    global.gc()
  }
}

// Every library's keys have the same length (a fixed-width tag of its id, not the id itself):
// Redis memory per held lock depends on it, by allocator size class.
const libTag = require('node:crypto').createHash('sha256').update(libId).digest('hex').slice(0, 8)
const key = (...parts) => [cfg.prefix || 'dbbench', libTag, `s${scenario}`, ...parts].join(':')

async function mysqlHeadroom(probe) {
  const max = Number(await probe.variable('max_connections'))
  const used = await probe.connections()
  return Math.max(0, max - used - (cfg.mysqlConnMargin ?? 20))
}

// ───────────────────────────── 1. sequential ─────────────────────────────

async function s1(adapter) {
  const locker = await adapter.newLocker()
  phase = 'warm-up'
  for (let i = 0; i < cfg.s1Warmup; i++) {
    await locker.acquire(key('w', i))
    await locker.release()
  }
  phase = 'measure'
  const lat = []
  const end = performance.now() + cfg.s1MaxSeconds * 1000
  for (let i = 0; i < cfg.s1Pairs && performance.now() < end; i++) {
    const k = key(i)
    const t0 = process.hrtime.bigint()
    await locker.acquire(k)
    await locker.release()
    lat.push(Number(process.hrtime.bigint() - t0) / 1000)
  }
  lat.sort((a, b) => a - b)
  return { pairs: lat.length, p50: percentile(lat, 50), p90: percentile(lat, 90), p99: percentile(lat, 99), mean: mean(lat) }
}

// ───────────────────────────── 2. 100 in flight ─────────────────────────────

async function s2(adapter, probe) {
  let workers = cfg.s2Workers
  let capped = null
  if (adapter.perLockerConnection) {
    const room = await mysqlHeadroom(probe)
    if (room < workers) {
      capped = `${room} connections (max_connections headroom)`
      workers = room
    }
    if (workers < 1) throw new Error('no server connections left')
  }
  phase = 'lockers'
  const lockers = []
  for (let w = 0; w < workers; w++) lockers.push(await adapter.newLocker())
  // One pair each before the clock starts: scripts loaded, connections open.
  phase = 'warm-up'
  await parallel(workers, async (w) => {
    await lockers[w].acquire(key(w, 'w'))
    await lockers[w].release()
  })
  let stop = false
  let pairs = 0
  let errors = 0
  let lastError = null
  const cycle = cfg.s2KeyCycle
  const loops = parallel(workers, async (w) => {
    const l = lockers[w]
    let j = 0
    while (!stop) {
      try {
        await l.acquire(key(w, j++ % cycle))
        await l.release()
        pairs++
      } catch (err) {
        errors++
        lastError = err
        await sleep(10)
      }
    }
  })
  phase = 'ramp-up'
  await sleep(cfg.s2WarmupMs)
  phase = 'measure'
  const a = await probe.snapshot()
  const p0 = pairs
  const c0 = cpuMicros()
  const t0 = performance.now()
  await sleep(cfg.s2Seconds * 1000)
  const b = await probe.snapshot()
  const p1 = pairs
  const c1 = cpuMicros()
  const t1 = performance.now()
  stop = true
  phase = 'drain'
  await withTimeout(loops, 15_000, 'workers did not stop within 15 s')
  const n = p1 - p0
  if (n === 0) throw new Error(`no pair completed${lastError ? `: ${lastError.message}` : ''}`)
  const d = probe.diff(a, b)
  if (errors) note(`${errors} errors, last: ${lastError && lastError.message}`)
  return {
    workers,
    capped,
    pairs: n,
    seconds: (t1 - t0) / 1000,
    pairsPerSec: n / ((t1 - t0) / 1000),
    cpuPerPair: (c1 - c0) / n,
    serverCpuPerPair: d.cpuMicros / n,
    cmdsPerPair: d.calls !== undefined ? d.calls / n : undefined,
    errors,
  }
}

// ───────────────────────────── 3. contention on one key ─────────────────────────────

async function s3(adapter, probe) {
  const workers = cfg.s3Workers
  const target = cfg.s3Sections
  const k = key('contended')
  phase = 'lockers'
  const lockers = []
  for (let w = 0; w < workers; w++) lockers.push(await adapter.newLocker())
  phase = 'warm-up'
  for (const l of lockers.slice(0, 2)) {
    await l.acquire(k)
    await l.release()
  }
  await sleep(50)

  let started = 0
  let completed = 0
  let holders = 0
  let violations = 0
  let stop = false
  let lastReleaseAt = null
  let lastReleaser = -1
  let selfRetakes = 0
  let transitions = 0
  let errors = 0
  let lastError = null
  const handoffs = []
  const holds = []
  const perWorker = new Array(workers).fill(0)
  const hold = () => new Promise((resolve) => setTimeout(resolve, cfg.s3HoldMs))

  phase = 'measure'
  const a = await probe.snapshot()
  const c0 = cpuMicros()
  const t0 = performance.now()
  const deadline = t0 + cfg.s3MaxSeconds * 1000
  const loops = parallel(workers, async (w) => {
    const l = lockers[w]
    while (!stop && started < target) {
      started++
      try {
        await l.acquire(k)
      } catch (err) {
        errors++
        lastError = err
        started--
        await sleep(10)
        continue
      }
      const got = performance.now()
      if (holders !== 0) violations++
      holders++
      if (lastReleaseAt !== null) {
        transitions++
        if (lastReleaser === w) selfRetakes++
        else handoffs.push(got - lastReleaseAt)
      }
      await hold()
      holds.push(performance.now() - got)
      holders--
      perWorker[w]++
      completed++
      // t_release: the moment the holder decides to let go, just before calling release().
      lastReleaser = w
      lastReleaseAt = performance.now()
      try {
        await l.release()
      } catch (err) {
        errors++
        lastError = err
      }
      if (performance.now() > deadline) stop = true
    }
  })
  await withTimeout(loops, cfg.s3MaxSeconds * 1000 + 20_000, `contention run did not finish (${completed} sections done)`)
  const t1 = performance.now()
  const c1 = cpuMicros()
  phase = 'after'
  const b = await probe.snapshot()
  const d = probe.diff(a, b)
  if (errors) note(`${errors} errors, last: ${lastError && lastError.message}`)
  handoffs.sort((x, y) => x - y)
  const shares = perWorker.map((n) => n / completed)
  return {
    sections: completed,
    seconds: (t1 - t0) / 1000,
    sectionsPerSec: completed / ((t1 - t0) / 1000),
    handoffs: handoffs.length,
    handoffMean: mean(handoffs),
    handoffP50: percentile(handoffs, 50),
    handoffP99: percentile(handoffs, 99),
    holdMean: mean(holds),
    fairness: Math.min(...shares) / Math.max(...shares),
    minShare: Math.min(...shares),
    maxShare: Math.max(...shares),
    selfRetake: transitions ? selfRetakes / transitions : NaN,
    violations,
    errors,
    cmdsPerSection: d.calls !== undefined ? d.calls / completed : undefined,
    readsPerSection: d.reads !== undefined ? d.reads / completed : undefined,
    scriptsPerSection: d.scripts !== undefined ? d.scripts / completed : undefined,
    byCmd: d.byCmd,
    questionsPerSection: d.questions !== undefined ? d.questions / completed : undefined,
    cpuPerSection: (c1 - c0) / completed,
  }
}

// ───────────────────────────── 4. 10 000 held at once ─────────────────────────────

async function acquireMany(adapter, n, make, timeoutMs) {
  const lockers = new Array(n)
  let next = 0
  let held = 0
  let lastError = null
  const run = parallel(Math.min(cfg.s4Concurrency, n), async () => {
    while (next < n) {
      const i = next++
      try {
        const l = await make()
        await l.acquire(key(i))
        lockers[i] = l
        held++
      } catch (err) {
        lastError = err
      }
    }
  })
  // Stalled = no acquisition completed for cfg.stallMs (sql-lock's pool of 10 does that), or
  // the whole acquisition took longer than timeoutMs.
  let stalled = null
  const t0 = performance.now()
  let lastHeld = 0
  let lastProgress = t0
  let watch
  const watchdog = new Promise((resolve) => {
    watch = setInterval(() => {
      const now = performance.now()
      if (held !== lastHeld) {
        lastHeld = held
        lastProgress = now
      }
      if (now - lastProgress > cfg.stallMs) {
        stalled = `stalled at ${held} held: no acquisition completed for ${(cfg.stallMs / 1000).toFixed(1)} s`
        resolve()
      } else if (now - t0 > timeoutMs) {
        stalled = `only ${held} held after ${Math.round(timeoutMs / 1000)} s`
        resolve()
      }
    }, 100)
  })
  await Promise.race([run, watchdog])
  clearInterval(watch)
  if (lastError) note(`acquire error: ${lastError.message}`)
  return { lockers, held, stalled, lastError }
}

async function verifyOnServer(probe, adapter, lockers) {
  const live = lockers.filter((l) => l && l.held())
  if (probe instanceof RedisProbe) {
    const withKey = live.filter((l) => l.serverKey)
    if (withKey.length === 0) return undefined
    const values = await probe.values(withKey.map((l) => l.serverKey))
    let ok = 0
    for (let i = 0; i < withKey.length; i++) if (values[i] === withKey[i].serverValue) ok++
    return ok
  }
  if (adapter.isDeadbolt && probe instanceof PgProbe) return probe.liveDeadboltLocks(key(''))
  if (adapter.isDeadbolt && probe instanceof MysqlProbe) {
    const rows = await probe.query('SELECT COUNT(*) AS n FROM deadbolt_locks WHERE name LIKE ? AND owner IS NOT NULL AND expires_at > NOW(6)', [`${key('')}%`])
    return Number(rows[0].n)
  }
  return undefined
}

async function releaseAll(lockers, timeoutMs) {
  let next = 0
  const run = parallel(cfg.s4Concurrency, async () => {
    while (next < lockers.length) {
      const l = lockers[next++]
      if (l && l.held()) await l.release().catch(() => {})
    }
  })
  await withTimeout(run, timeoutMs, 'release stalled').catch((err) => note(err.message))
}

async function s4(adapter, probe, baseConns) {
  let n = cfg.s4Locks
  let capped = null
  if (adapter.perLockerConnection) {
    const room = await mysqlHeadroom(probe)
    if (room < n) {
      const max = await probe.variable('max_connections')
      capped = `one connection per lock: stopped at ${room} (max_connections ${max}, ${cfg.mysqlConnMargin ?? 20} left for others)`
      n = room
    }
  }
  const isRedis = probe instanceof RedisProbe
  phase = 'baseline'
  gc()
  const m0 = process.memoryUsage()
  const u0 = isRedis ? await probe.usedMemory() : NaN
  const t0 = performance.now()
  phase = 'acquire'
  const { lockers, held, stalled, lastError } = await acquireMany(adapter, n, () => adapter.newLocker(), cfg.s4AcquireTimeoutMs)
  const acquireSeconds = (performance.now() - t0) / 1000
  if (!stalled && held < n) throw new Error(`only ${held} of ${n} acquired: ${lastError ? lastError.message : 'unknown'}`)
  phase = 'measure'
  gc()
  const m1 = process.memoryUsage()
  const u1 = isRedis ? await probe.usedMemory() : NaN
  const conns = (await probe.connections()) - baseConns
  const libHeld = lockers.filter((l) => l && l.held()).length
  const serverHeld = stalled ? undefined : await verifyOnServer(probe, adapter, lockers)
  const result = {
    target: cfg.s4Locks,
    attempted: n,
    held,
    libHeld,
    serverHeld,
    capped,
    stalled,
    acquireSeconds,
    connections: conns,
    heapPerLock: held ? (m1.heapUsed + m1.external - (m0.heapUsed + m0.external)) / held : NaN,
    rssPerLock: held ? (m1.rss - m0.rss) / held : NaN,
    serverMemPerLock: held ? (u1 - u0) / held : NaN,
  }
  if (stalled) return result // pending acquisitions would now proceed; exiting rolls everything back
  phase = 'release'
  await releaseAll(lockers, 30_000)
  return result
}

// ───────────────────────────── 5. auto-extended locks ─────────────────────────────

async function s5(adapter, probe) {
  if (!adapter.newAutoLocker) throw new Error('no auto-extension in this library')
  const n = cfg.s5Locks
  let lost = 0
  const onLost = () => { lost++ }
  phase = 'acquire'
  const t0 = performance.now()
  const { lockers, held, stalled, lastError } = await acquireMany(adapter, n, () => adapter.newAutoLocker(onLost), cfg.s5AcquireTimeoutMs)
  const acquireSeconds = (performance.now() - t0) / 1000
  if (stalled) throw new Error(stalled)
  if (held < n) throw new Error(`only ${held} of ${n} acquired: ${lastError ? lastError.message : 'unknown'}`)
  phase = 'settle'
  await sleep(cfg.s5SettleMs)
  phase = 'measure'
  const a = await probe.snapshot()
  const c0 = cpuMicros()
  const ta = performance.now()
  await sleep(cfg.s5Seconds * 1000)
  const b = await probe.snapshot()
  const c1 = cpuMicros()
  const tb = performance.now()
  const d = probe.diff(a, b)
  const ticks = (tb - ta) / SETTINGS.autoEvery
  phase = 'verify'
  const libHeld = lockers.filter((l) => l && l.held()).length
  const serverHeld = await verifyOnServer(probe, adapter, lockers)
  const result = {
    locks: n,
    held,
    libHeld,
    serverHeld,
    lost: lost + (adapter.lost ? adapter.lost() : 0),
    heldCount: adapter.heldCount ? adapter.heldCount() : undefined,
    acquireSeconds,
    seconds: (tb - ta) / 1000,
    ticks,
    ttl: SETTINGS.autoTtl,
    every: SETTINGS.autoEvery,
    cmdsPerTick: d.calls !== undefined ? d.calls / ticks : undefined,
    scriptsPerTick: d.scripts !== undefined ? d.scripts / ticks : undefined,
    readsPerTick: d.reads !== undefined ? d.reads / ticks : undefined,
    questionsPerTick: d.questions !== undefined ? d.questions / ticks : undefined,
    byCmdPerTick: d.byCmd ? Object.fromEntries(Object.entries(d.byCmd).map(([k, v]) => [k, v / ticks])) : undefined,
    cpuPerTick: (c1 - c0) / ticks,
    serverCpuPerTick: d.cpuMicros / ticks,
  }
  phase = 'release'
  await releaseAll(lockers, 30_000)
  return result
}

// ───────────────────────────── main ─────────────────────────────

async function main() {
  if (!spec) throw new Error(`unknown library "${libId}" (known: ${Object.keys(LIBS).join(', ')})`)
  const urls = cfg.urls || { redis: 'redis://127.0.0.1:6379', mysql: 'mysql://root@127.0.0.1:3306/test' }
  phase = 'probe'
  const probe = spec.backend === 'redis'
    ? new RedisProbe(urls.redis)
    : spec.backend === 'dynamodb' ? new DynaliteProbe(cfg.dynalitePid, cfg.dynalitePort)
      : spec.backend === 'postgres' ? new PgProbe(urls.postgres, cfg.pgPid)
        : spec.backend === 'sqlite' ? new FileProbe()
          : spec.backend === 'mysql' ? new MysqlProbe(urls.mysql, cfg.mysqlPid)
            // bench/multi.js: several Redis servers; the probe reads one of them.
            : new RedisProbe(spec.probe(urls))
  await probe.open()
  const baseConns = await probe.connections()
  phase = 'open'
  const adapter = spec.make(urls)
  adapter.isDeadbolt = !!spec.deadbolt
  await adapter.open()
  let result
  switch (scenario) {
    case 1: result = await s1(adapter, probe); break
    case 2: result = await s2(adapter, probe); break
    case 3: result = await s3(adapter, probe); break
    case 4: result = await s4(adapter, probe, baseConns); break
    case 5: result = await s5(adapter, probe); break
    default: throw new Error(`unknown scenario ${scenarioArg}`)
  }
  phase = 'close'
  await withTimeout(Promise.resolve(adapter.close()), 5000, 'close timed out').catch((err) => note(err.message))
  await probe.close()
  emit(result)
}

main().catch((err) => emit({ error: `${phase}: ${err && err.message ? err.message : err}` }))
