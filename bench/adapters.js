'use strict'
// One adapter per library: the same small surface for every peer, so the scenarios in
// worker.js are written once.
//
//   adapter.open()                 connect (and whatever the library needs before use)
//   adapter.newLocker()            a holder of at most one lock at a time, with
//     locker.acquire(key)          waits (unlimited retries) until it holds `key`
//     locker.release()             releases what it holds
//     locker.held()                does the library still consider it held?
//     locker.serverKey / .serverValue   where and what the store should hold (verification)
//   adapter.newAutoLocker(onLost)  the same, with the library's own auto-extension (scenario 5)
//   adapter.close()
//
// Settings are the same for everyone (see SETTINGS): ttl 10 s, 10 ms between attempts,
// unlimited retries. Libraries that cannot poll (sql-lock, GET_LOCK) wait on the server.

const fs = require('node:fs')
const path = require('node:path')
const { randomUUID } = require('node:crypto')
const { sleep } = require('./util')

const SETTINGS = Object.freeze({
  ttl: 10_000,
  retryDelay: 10,
  // redlock is the only peer with a jitter option: give it deadbolt's default relative
  // jitter (±50 % of the delay), i.e. ±5 ms.
  redlockJitter: 5,
  // Scenario 5 (auto-extension): lease and heartbeat period.
  autoTtl: 3_000,
  autoEvery: 1_000,
  // GET_LOCK waits on the server; "unlimited" is a year, re-asked if it ever returns 0.
  getLockTimeoutS: 31_536_000,
})

const ROOT = path.join(__dirname, '..')

/**
 * Which deadbolt is being measured: a hash over the addon and the JS it loads (index.js, lib/,
 * compat/, binding.js), which a concurrent build or edit may change between runs.
 */
function deadboltFingerprint() {
  const crypto = require('node:crypto')
  const h = crypto.createHash('sha256')
  let addon = null
  const files = []
  for (const f of fs.readdirSync(ROOT).sort()) {
    if (f.startsWith('deadbolt.') && f.endsWith('.node')) addon = f
    if (f === 'index.js' || f === 'binding.js' || (f.startsWith('deadbolt.') && f.endsWith('.node'))) files.push(f)
  }
  for (const dir of ['lib', 'compat']) {
    try {
      for (const f of fs.readdirSync(path.join(ROOT, dir)).sort()) if (f.endsWith('.js')) files.push(path.join(dir, f))
    } catch {}
  }
  for (const f of files) {
    try {
      h.update(f)
      h.update(fs.readFileSync(path.join(ROOT, f)))
    } catch {}
  }
  let built = ''
  try {
    built = fs.statSync(path.join(ROOT, addon)).mtime.toISOString()
  } catch {}
  return { id: h.digest('hex').slice(0, 10), addon, built }
}

let loadedBuild = null

/** The addon may be rebuilt under us by a concurrent build: wait until it is present and settled. */
function loadDeadbolt() {
  const deadline = Date.now() + 120_000
  let lastErr
  while (Date.now() < deadline) {
    try {
      const addon = fs.readdirSync(ROOT).find((f) => f.startsWith('deadbolt.') && f.endsWith('.node'))
      if (addon) {
        const st = fs.statSync(path.join(ROOT, addon))
        if (Date.now() - st.mtimeMs > 1500 && st.size > 0) {
          const before = deadboltFingerprint()
          const mod = require(ROOT)
          loadedBuild = before
          return mod
        }
      }
    } catch (err) {
      lastErr = err
      if (!/\.node|ELF|binding|Cannot find module|ENOENT|too short/i.test(String(err && err.message))) throw err
    }
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 500)
  }
  throw lastErr || new Error('the deadbolt addon did not appear within 120 s')
}

function redisHostPort(url) {
  const u = new URL(url)
  return { host: u.hostname || '127.0.0.1', port: Number(u.port || 6379), db: Number((u.pathname || '/0').slice(1) || 0) }
}

// ───────────────────────────── deadbolt (modern API) ─────────────────────────────

/**
 * `extra`: more acquire options for every lock (`{ fencing: false }`). `load`: where deadbolt
 * comes from (this checkout by default; another one for the baseline adapter).
 */
function deadbolt(url, extra = {}, load = loadDeadbolt) {
  const { connect } = load()
  const opts = { ttl: SETTINGS.ttl, wait: Infinity, retryDelay: SETTINGS.retryDelay, ...extra }
  let client
  /** One worker's lock slot, acquiring with `o`. */
  const locker = (o) => {
    let lock = null
    return {
      async acquire(key) {
        lock = await client.acquire(key, o)
      },
      release() {
        const l = lock
        lock = null
        return l.release()
      },
      held: () => lock !== null && lock.held,
      get serverKey() { return lock && lock.key },
      get serverValue() { return lock && lock.owner },
    }
  }
  return {
    async open() {
      client = await connect(url)
    },
    newLocker() {
      return locker(opts)
    },
    newAutoLocker(onLost) {
      return locker({ ttl: SETTINGS.autoTtl, wait: Infinity, retryDelay: SETTINGS.retryDelay, autoExtend: true, extendEvery: SETTINGS.autoEvery, onLost, ...extra })
    },
    heldCount: () => client.heldCount,
    async close() {
      await client.close()
    },
  }
}

// ───────────────────────────── deadbolt, observed ─────────────────────────────

/**
 * `adapter` with someone listening while it runs. `how`: 'channels', a no-op subscriber on
 * every event of every deadbolt diagnostics channel (the cost of publishing alone); 'otel',
 * deadbolt/otel recording into the OpenTelemetry SDK (spans batched to an exporter that drops
 * them, metrics aggregated in memory, as an application exporting them would pay, minus the
 * export itself).
 */
function observed(adapter, how) {
  let undo = () => {}
  return {
    ...adapter,
    async open() {
      loadDeadbolt()
      if (how === 'channels') undo = subscribeAll()
      else if (how === 'otel-noop') undo = instrumentOtelNoop()
      else undo = instrumentOtel()
      await adapter.open()
    },
    async close() {
      await adapter.close()
      undo()
    },
  }
}

function subscribeAll() {
  const dc = require('node:diagnostics_channel')
  const noop = () => {}
  const handlers = { start: noop, end: noop, asyncStart: noop, asyncEnd: noop, error: noop }
  const traced = ['acquire', 'release', 'extend'].map((n) => dc.tracingChannel(`deadbolt:${n}`))
  for (const tc of traced) tc.subscribe(handlers)
  dc.subscribe('deadbolt:lost', noop)
  dc.subscribe('deadbolt:leader', noop)
  return () => {
    for (const tc of traced) tc.unsubscribe(handlers)
    dc.unsubscribe('deadbolt:lost', noop)
    dc.unsubscribe('deadbolt:leader', noop)
  }
}

function instrumentOtel() {
  const { BasicTracerProvider, BatchSpanProcessor } = require('@opentelemetry/sdk-trace-base')
  const { MeterProvider, MetricReader } = require('@opentelemetry/sdk-metrics')
  const { instrument } = require(path.join(ROOT, 'otel'))
  const drop = { export: (spans, done) => done({ code: 0 }), shutdown: async () => {}, forceFlush: async () => {} }
  class Idle extends MetricReader {
    async onForceFlush() {}
    async onShutdown() {}
  }
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(drop)] })
  const meterProvider = new MeterProvider({ readers: [new Idle()] })
  return instrument({ tracerProvider, meterProvider })
}

/**
 * deadbolt/otel on the OpenTelemetry API's no-op providers (no SDK: every span, record and
 * counter call returns at once), so that what deadbolt/otel and the channels cost by
 * themselves is told apart from the SDK's own work (`deadbolt-otel` less this row).
 */
function instrumentOtelNoop() {
  const api = require('@opentelemetry/api')
  const { instrument } = require(path.join(ROOT, 'otel'))
  return instrument({ tracerProvider: new api.ProxyTracerProvider(), meterProvider: api.metrics.getMeterProvider() })
}

/** deadbolt from the checkout at BENCH_BASELINE (a build of another commit), for A/B runs. */
function loadBaseline() {
  if (!process.env.BENCH_BASELINE) throw new Error('deadbolt-baseline needs BENCH_BASELINE=<path of another deadbolt checkout, built>')
  return require(path.resolve(process.env.BENCH_BASELINE))
}

// ───────────────────────────── deadbolt's redislock face ─────────────────────────────

/** `extra`: more createLock options for every lock (`{ fencing: true }`). */
function deadboltRedislock(url, extra = {}) {
  const { createLock } = loadDeadbolt()
  const opts = { timeout: SETTINGS.ttl, retries: -1, delay: SETTINGS.retryDelay, ...extra }
  return {
    async open() {},
    newLocker() {
      // One redislock-style Lock object per worker, reused across keys (as redislock allows).
      const lock = createLock(url, opts)
      let key = null
      return {
        async acquire(k) {
          await lock.acquire(k)
          key = k
        },
        release: () => lock.release(),
        held: () => lock._locked,
        get serverKey() { return key },
        get serverValue() { return lock._id },
      }
    },
    async close() {},
  }
}

// ───────────────────────────── redislock 1.3 (node_redis v3) ─────────────────────────────

function redislock(url) {
  const lib = require('redislock')
  const opts = { timeout: SETTINGS.ttl, retries: -1, delay: SETTINGS.retryDelay }
  let client
  return {
    async open() {
      const { host, port, db } = redisHostPort(url)
      client = require('redis3').createClient({ host, port, db })
      await new Promise((resolve, reject) => {
        client.once('ready', resolve)
        client.once('error', reject)
      })
      client.on('error', (err) => process.stderr.write(`redis3 error: ${err.message}\n`))
    },
    newLocker() {
      const lock = lib.createLock(client, opts)
      let key = null
      return {
        async acquire(k) {
          await lock.acquire(k)
          key = k
        },
        release: () => lock.release(),
        held: () => lock._locked,
        get serverKey() { return key },
        get serverValue() { return lock._id },
      }
    },
    async close() {
      await new Promise((resolve) => client.quit(() => resolve()))
    },
  }
}

// ───────────────────────────── redlock 4 (ioredis) ─────────────────────────────

function redlock(url) {
  const Redlock = require('redlock')
  const Redis = require('ioredis')
  let client
  let rl
  return {
    async open() {
      client = new Redis(url)
      await client.ping()
      rl = new Redlock([client], { retryCount: -1, retryDelay: SETTINGS.retryDelay, retryJitter: SETTINGS.redlockJitter, driftFactor: 0.01 })
      rl.on('clientError', (err) => process.stderr.write(`redlock clientError: ${err.message}\n`))
    },
    newLocker() {
      let lock = null
      return {
        async acquire(key) {
          lock = await rl.lock(key, SETTINGS.ttl)
        },
        release() {
          const l = lock
          lock = null
          return l.unlock()
        },
        held: () => lock !== null && lock.expiration > Date.now(),
        get serverKey() { return lock && lock.resource[0] },
        get serverValue() { return lock && lock.value },
      }
    },
    async close() {
      client.disconnect()
    },
  }
}

// ───────────────────────────── redis-semaphore 5 (ioredis) ─────────────────────────────

/** `from`: the module (redis-semaphore, or deadbolt's face of it: the same code drives both). */
function redisSemaphore(url, from = 'redis-semaphore') {
  const { Mutex } = require(from)
  const Redis = require('ioredis')
  let client
  let lostCount = 0
  // The default onLockLost throws (an unhandled crash): count instead.
  const countLost = () => { lostCount++ }
  const make = (key, auto, onLost) =>
    new Mutex(client, key, {
      lockTimeout: auto ? SETTINGS.autoTtl : SETTINGS.ttl,
      acquireTimeout: Infinity,
      retryInterval: SETTINGS.retryDelay,
      // Off in scenarios 1–4 (nobody else auto-extends there); on in scenario 5.
      refreshInterval: auto ? SETTINGS.autoEvery : 0,
      onLockLost: onLost || countLost,
    })
  const locker = (auto, onLost) => {
    let m = null
    return {
      async acquire(key) {
        m = make(key, auto, onLost)
        await m.acquire()
      },
      release() {
        const x = m
        m = null
        return x.release()
      },
      held: () => m !== null && m.isAcquired,
      get serverKey() { return m && m._key },
      get serverValue() { return m && m.identifier },
    }
  }
  return {
    async open() {
      client = new Redis(url)
      await client.ping()
    },
    newLocker: () => locker(false),
    newAutoLocker: (onLost) => locker(true, onLost),
    lost: () => lostCount,
    async close() {
      client.disconnect()
    },
  }
}

// ──────────── node-redlock 5 and deadbolt's faces of it (deadbolt/redlock, /v4) ────────────

/**
 * A node-redlock-shaped library on one ioredis client: `make(clients, settings)` builds the
 * Redlock; `v4` says whether it has v4's lock/unlock (else v5's acquire/release).
 */
function redlockLike(url, make, v4) {
  const Redis = require('ioredis')
  let client
  let rl
  return {
    async open() {
      client = new Redis(url)
      await client.ping()
      rl = make([client], { retryCount: -1, retryDelay: SETTINGS.retryDelay, retryJitter: SETTINGS.redlockJitter, driftFactor: 0.01 })
      rl.on(v4 ? 'clientError' : 'error', () => {})
    },
    newLocker() {
      let lock = null
      return {
        async acquire(key) {
          lock = v4 ? await rl.lock(key, SETTINGS.ttl) : await rl.acquire([key], SETTINGS.ttl)
        },
        release() {
          const l = lock
          lock = null
          return v4 ? l.unlock() : l.release()
        },
        held: () => lock !== null && lock.expiration > Date.now(),
        get serverKey() { return lock && (v4 ? lock.resource : lock.resources[0]) },
        get serverValue() { return lock && lock.value },
      }
    },
    async close() {
      client.disconnect()
    },
  }
}

const redlock5 = (url) => redlockLike(url, (cs, o) => new (require('redlock5').default)(cs, o), false)
const deadboltRedlock = (url) => redlockLike(url, (cs, o) => new (require('../redlock').default)(cs, o), false)
const deadboltRedlockV4 = (url) => redlockLike(url, (cs, o) => new (require('../redlock/v4'))(cs, o), true)

// ───────────── several servers: Redlock (N independent servers) and Redis Cluster ─────────────
// Used by bench/multi.js (not by run.js's table of single-server peers).

/** node-redlock 4 over N independent servers, or over one ioredis Cluster (`cluster: true`). */
function redlockOver(urls, cluster) {
  const Redlock = require('redlock')
  const Redis = require('ioredis')
  let clients
  let rl
  return {
    async open() {
      clients = cluster ? [new Redis.Cluster(urls.map((u) => redisHostPort(u)))] : urls.map((u) => new Redis(u))
      await Promise.all(clients.map((c) => c.ping()))
      rl = new Redlock(clients, { retryCount: -1, retryDelay: SETTINGS.retryDelay, retryJitter: SETTINGS.redlockJitter, driftFactor: 0.01 })
      rl.on('clientError', () => {})
    },
    newLocker() {
      let lock = null
      return {
        async acquire(key) {
          lock = await rl.lock(key, SETTINGS.ttl)
        },
        release() {
          const l = lock
          lock = null
          return l.unlock()
        },
        held: () => lock !== null && lock.expiration > Date.now(),
      }
    },
    async close() {
      for (const c of clients) c.disconnect()
    },
  }
}

/** redis-semaphore 5's RedlockMutex over N independent servers. */
function redlockMutex(urls) {
  const { RedlockMutex } = require('redis-semaphore')
  const Redis = require('ioredis')
  let clients
  return {
    async open() {
      clients = urls.map((u) => new Redis(u))
      await Promise.all(clients.map((c) => c.ping()))
    },
    newLocker() {
      let m = null
      return {
        async acquire(key) {
          m = new RedlockMutex(clients, key, { lockTimeout: SETTINGS.ttl, acquireTimeout: Infinity, retryInterval: SETTINGS.retryDelay, refreshInterval: 0, onLockLost: () => {} })
          await m.acquire()
        },
        release() {
          const x = m
          m = null
          return x.release()
        },
        held: () => m !== null && m.isAcquired,
      }
    },
    async close() {
      for (const c of clients) c.disconnect()
    },
  }
}

// ───────────────────────────── raw ioredis: SET NX PX + compare-and-delete ─────────────────────────────

function rawIoredis(url) {
  const Redis = require('ioredis')
  let client
  return {
    async open() {
      client = new Redis(url)
      // defineCommand: EVALSHA, falling back to EVAL once (the idiomatic ioredis way).
      client.defineCommand('delIfEqual', {
        numberOfKeys: 1,
        lua: "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
      })
      await client.ping()
    },
    newLocker() {
      let key = null
      let token = null
      return {
        async acquire(k) {
          const t = randomUUID()
          for (;;) {
            if ((await client.set(k, t, 'PX', SETTINGS.ttl, 'NX')) === 'OK') break
            await sleep(SETTINGS.retryDelay)
          }
          key = k
          token = t
        },
        release() {
          const k = key
          key = null
          return client.delIfEqual(k, token)
        },
        held: () => key !== null,
        get serverKey() { return key },
        get serverValue() { return token },
      }
    },
    async close() {
      client.disconnect()
    },
  }
}

// ───────────────────────────── sql-lock 0.1 ─────────────────────────────

function sqlLock(url) {
  const lib = require('sql-lock')
  return {
    async open() {
      await lib.initialize(url, { locking_ttl: SETTINGS.ttl })
    },
    newLocker() {
      let releaser = null
      return {
        async acquire(key) {
          // Waits on the InnoDB row lock (no client polling); one transaction per held lock.
          releaser = await lib.getLock(key, SETTINGS.ttl)
        },
        release() {
          const r = releaser
          releaser = null
          return r()
        },
        held: () => releaser !== null,
      }
    },
    async close() {},
  }
}

// ───────────────────────────── raw GET_LOCK / RELEASE_LOCK over mysql2 ─────────────────────────────

function rawGetLock(url) {
  const mysql = require('mysql2/promise')
  return {
    async open() {},
    // GET_LOCK is owned by a connection: each holder needs a connection of its own.
    perLockerConnection: true,
    async newLocker() {
      const conn = await mysql.createConnection(url)
      let key = null
      return {
        async acquire(k) {
          for (;;) {
            const [[row]] = await conn.query('SELECT GET_LOCK(?, ?) AS r', [k, SETTINGS.getLockTimeoutS])
            if (Number(row.r) === 1) break
          }
          key = k
        },
        async release() {
          const k = key
          key = null
          await conn.query('SELECT RELEASE_LOCK(?)', [k])
        },
        held: () => key !== null,
        close: () => conn.end().catch(() => {}),
      }
    },
    async close() {},
  }
}

// ───────────────────────────── DynamoDB ─────────────────────────────

/** Table, endpoint and region of a deadbolt `dynamodb://` URL, for the other libraries. */
function dynamoTarget(url) {
  const u = new URL(url.replace(/^dynamodb:/i, 'http:'))
  return { table: url.slice('dynamodb://'.length).split(/[?/]/)[0], endpoint: u.searchParams.get('endpoint') || undefined, region: u.searchParams.get('region') || 'us-east-1' }
}

/** aws-sdk v2's DocumentClient, what dynamodb-lock-client is written for. */
function documentClient(url) {
  process.env.AWS_SDK_JS_SUPPRESS_MAINTENANCE_MODE_MESSAGE = '1'
  const { DynamoDB } = require('aws-sdk')
  const { endpoint, region } = dynamoTarget(url)
  // The SDK's own agent keeps connections alive, as deadbolt's client does.
  const https = require('node:http')
  return new DynamoDB.DocumentClient({ endpoint, region, maxRetries: 3, httpOptions: { agent: new https.Agent({ keepAlive: true, maxSockets: 100 }) } })
}

/**
 * dynamodb-lock-client 0.7 (npm), on aws-sdk v2. FailClosed: a conditional put polled every
 * acquirePeriodMs, released by a conditional delete, no lease (a crashed holder keeps the lock
 * until someone deletes it). FailOpen: a lease, fencing tokens and heartbeats, but a waiter
 * that finds the lock held always sleeps a whole lease before trying again, so it only runs
 * the uncontended scenarios.
 */
function dynamodbLockClient(url, mode) {
  const lib = require('dynamodb-lock-client')
  let client
  return {
    async open() {
      const dynamodb = documentClient(url)
      const { table } = dynamoTarget(url)
      client = mode === 'closed'
        ? new lib.FailClosed({ dynamodb, lockTable: table, partitionKey: 'key', acquirePeriodMs: SETTINGS.retryDelay, retryCount: Number.MAX_SAFE_INTEGER })
        : new lib.FailOpen({ dynamodb, lockTable: table, partitionKey: 'key', leaseDurationMs: SETTINGS.ttl, retryCount: Number.MAX_SAFE_INTEGER })
    },
    newLocker() {
      let lock = null
      let key = null
      return {
        async acquire(k) {
          lock = await new Promise((resolve, reject) => client.acquireLock(k, (err, l) => (err ? reject(err) : resolve(l))))
          lock.on('error', () => {})
          key = k
        },
        release() {
          const l = lock
          lock = null
          return new Promise((resolve, reject) => l.release((err) => (err ? reject(err) : resolve())))
        },
        held: () => lock !== null,
        get serverKey() { return key },
      }
    },
    async close() {},
  }
}

// ───────────────────────────── advisory-lock 2.0 (pg) ─────────────────────────────

function advisoryLock(url) {
  const createMutex = require('advisory-lock').default(url)
  return {
    async open() {},
    // Each lock() opens a pg connection of its own and holds it until unlock: a held lock
    // costs a server connection.
    perLockerConnection: true,
    newLocker() {
      let unlock = null
      return {
        async acquire(key) {
          // pg_advisory_lock waits on the server (no client polling).
          unlock = await createMutex(key).lock()
        },
        release() {
          const u = unlock
          unlock = null
          return u()
        },
        held: () => unlock !== null,
      }
    },
    async close() {},
  }
}

// ───────────────────────────── raw pg_advisory_lock over pg ─────────────────────────────

function rawPgAdvisory(url) {
  const { Client } = require('pg')
  return {
    async open() {},
    // Advisory locks belong to a session: each holder needs a connection of its own.
    perLockerConnection: true,
    async newLocker() {
      const client = new Client({ connectionString: url })
      await client.connect()
      let key = null
      return {
        async acquire(k) {
          // Waits on the server; the name is hashed to the 64-bit key by the server.
          await client.query('SELECT pg_advisory_lock(hashtextextended($1, 0))', [k])
          key = k
        },
        async release() {
          const k = key
          key = null
          await client.query('SELECT pg_advisory_unlock(hashtextextended($1, 0))', [k])
        },
        held: () => key !== null,
        close: () => client.end().catch(() => {}),
      }
    },
    async close() {},
  }
}

// ───────────────────────────── proper-lockfile 4 (lock directories) ─────────────────────────────

/**
 * proper-lockfile: a lock is a directory `<file>.lock` made with mkdir (atomic), kept fresh by
 * touching its mtime every `stale / 2` ms; a lock older than `stale` may be taken over. Lock
 * files live in `<dir of the SQLite URL>/proper-lockfile/`, one per key.
 */
function properLockfile(sqliteUrl) {
  const lockfile = require('proper-lockfile')
  const dir = path.join(path.dirname(sqliteUrl.slice('sqlite://'.length)), 'proper-lockfile')
  let lost = 0
  const opts = {
    // The lease: a lock not refreshed for this long counts as abandoned.
    stale: SETTINGS.ttl,
    realpath: false,
    // Unlimited retries, every 10 ms (no backoff), as for every peer.
    retries: { forever: true, factor: 1, minTimeout: SETTINGS.retryDelay, maxTimeout: SETTINGS.retryDelay, randomize: false },
    // The default throws (an uncaught exception): count instead.
    onCompromised: () => { lost++ },
  }
  return {
    async open() {
      fs.mkdirSync(dir, { recursive: true })
    },
    newLocker() {
      let release = null
      let key = null
      return {
        async acquire(k) {
          release = await lockfile.lock(path.join(dir, k), opts)
          key = k
        },
        release() {
          const r = release
          release = null
          key = null
          return r()
        },
        held: () => release !== null,
        get serverKey() { return key },
      }
    },
    lost: () => lost,
    async close() {},
  }
}

// ───────────────────────────── registry ─────────────────────────────

const LIBS = {
  deadbolt: { label: 'deadbolt', backend: 'redis', make: (u) => deadbolt(u.redis), scenarios: [1, 2, 3, 4, 5] },
  // The same without fencing tokens, the like-for-like of the peers, none of which has them.
  'deadbolt-unfenced': { label: 'deadbolt, fencing: false', backend: 'redis', make: (u) => deadbolt(u.redis, { fencing: false }), scenarios: [1, 2, 3, 4], deadbolt: true },
  // The redislock face as a migrating user gets it (no token, as redislock), and with deadbolt's
  // opt-in `fencing: true` (a token drawn in a script call per acquisition).
  'deadbolt-redislock': { label: 'deadbolt (redislock face)', backend: 'redis', make: (u) => deadboltRedislock(u.redis), scenarios: [1, 2], compareTo: 'redislock' },
  'deadbolt-redislock-fenced': { label: 'deadbolt (redislock face), fencing: true', backend: 'redis', make: (u) => deadboltRedislock(u.redis, { fencing: true }), scenarios: [1, 2], compareTo: 'redislock', deadbolt: true },
  // The cost of being observed, against plain deadbolt in the same run (bench/README.md).
  'deadbolt-channels': { label: 'deadbolt, channels subscribed (no-op)', backend: 'redis', make: (u) => observed(deadbolt(u.redis), 'channels'), scenarios: [1, 2], compareTo: 'deadbolt', deadbolt: true },
  'deadbolt-otel': { label: 'deadbolt, deadbolt/otel on', backend: 'redis', make: (u) => observed(deadbolt(u.redis), 'otel'), scenarios: [1, 2], compareTo: 'deadbolt', deadbolt: true },
  'deadbolt-otel-noop': { label: 'deadbolt, deadbolt/otel on the API\'s no-op providers (no SDK)', backend: 'redis', make: (u) => observed(deadbolt(u.redis), 'otel-noop'), scenarios: [1, 2], compareTo: 'deadbolt', deadbolt: true },
  redislock: { label: 'redislock 1.3 (redis@3)', backend: 'redis', make: (u) => redislock(u.redis), scenarios: [1, 2, 3, 4] },
  redlock: { label: 'redlock 4 (ioredis)', backend: 'redis', make: (u) => redlock(u.redis), scenarios: [1, 2, 3, 4] },
  redlock5: { label: 'redlock 5.0.0-beta.2 (ioredis)', backend: 'redis', make: (u) => redlock5(u.redis), scenarios: [1, 2, 3, 4] },
  // The node-redlock faces, on the same ioredis client as the originals, each against its own.
  'deadbolt-redlock-v5': { label: 'deadbolt/redlock (ioredis)', backend: 'redis', make: (u) => deadboltRedlock(u.redis), scenarios: [1, 2, 3, 4], compareTo: 'redlock5', deadbolt: true },
  'deadbolt-redlock-v4': { label: 'deadbolt/redlock/v4 (ioredis)', backend: 'redis', make: (u) => deadboltRedlockV4(u.redis), scenarios: [1, 2, 3, 4], compareTo: 'redlock', deadbolt: true },
  // The redis-semaphore face as a migrating user gets it: the same calls, the same ioredis client.
  'deadbolt-redis-semaphore': { label: 'deadbolt (redis-semaphore face)', backend: 'redis', make: (u) => redisSemaphore(u.redis, path.join(ROOT, 'redis-semaphore')), scenarios: [1, 2, 3, 4, 5], compareTo: 'redis-semaphore', deadbolt: true },
  'redis-semaphore': { label: 'redis-semaphore 5 (ioredis)', backend: 'redis', make: (u) => redisSemaphore(u.redis), scenarios: [1, 2, 3, 4, 5] },
  'raw-ioredis': { label: 'raw ioredis SET NX + EVALSHA', backend: 'redis', make: (u) => rawIoredis(u.redis), scenarios: [1, 2, 3, 4] },
  'deadbolt-mysql': { label: 'deadbolt (mysql)', backend: 'mysql', make: (u) => deadbolt(u.mysql), scenarios: [1, 2, 3, 4, 5], deadbolt: true },
  'sql-lock': { label: 'sql-lock 0.1', backend: 'mysql', make: (u) => sqlLock(u.mysql), scenarios: [1, 2, 3, 4] },
  'raw-getlock': { label: 'raw GET_LOCK (mysql2)', backend: 'mysql', make: (u) => rawGetLock(u.mysql), scenarios: [1, 2, 3, 4] },
  'deadbolt-pg': { label: 'deadbolt (postgres)', backend: 'postgres', make: (u) => deadbolt(u.postgres), scenarios: [1, 2, 3, 4, 5], deadbolt: true },
  'advisory-lock': { label: 'advisory-lock 2.0 (pg)', backend: 'postgres', make: (u) => advisoryLock(u.postgres), scenarios: [1, 2, 3, 4] },
  'raw-pg-advisory': { label: 'raw pg_advisory_lock (pg)', backend: 'postgres', make: (u) => rawPgAdvisory(u.postgres), scenarios: [1, 2, 3, 4] },
  'deadbolt-sqlite': { label: 'deadbolt (sqlite)', backend: 'sqlite', make: (u) => deadbolt(u.sqlite), scenarios: [1, 2, 3, 4], deadbolt: true },
  'proper-lockfile': { label: 'proper-lockfile 4.1', backend: 'sqlite', make: (u) => properLockfile(u.sqlite), scenarios: [1, 2, 3, 4] },
  // DynamoDB: every library on the same dynalite server and table (partition key `key`, S).
  'deadbolt-dynamodb': { label: 'deadbolt (dynamodb)', backend: 'dynamodb', make: (u) => deadbolt(u.dynamodb), scenarios: [1, 2, 3, 4], deadbolt: true },
  'dynamodb-lock-client': { label: 'dynamodb-lock-client 0.7 FailClosed (aws-sdk 2)', backend: 'dynamodb', make: (u) => dynamodbLockClient(u.dynamodb, 'closed'), scenarios: [1, 2, 3, 4] },
  'dynamodb-lock-client-open': { label: 'dynamodb-lock-client 0.7 FailOpen (aws-sdk 2)', backend: 'dynamodb', make: (u) => dynamodbLockClient(u.dynamodb, 'open'), scenarios: [1, 2] },
}
LIBS.deadbolt.deadbolt = true
// Another build (BENCH_BASELINE: the path of another checkout, built), so that a change is
// measured against what it changes, in the same run. Listed only when given.
if (process.env.BENCH_BASELINE) {
  LIBS['deadbolt-baseline'] = { label: 'deadbolt, baseline build (BENCH_BASELINE)', backend: 'redis', make: (u) => deadbolt(u.redis, {}, loadBaseline), scenarios: [1, 2], compareTo: 'deadbolt', deadbolt: true }
  // The same on the SQL stores, against their own deadbolt rows.
  for (const [backend, row] of [['mysql', 'deadbolt-mysql'], ['postgres', 'deadbolt-pg'], ['sqlite', 'deadbolt-sqlite']]) {
    LIBS[`${row}-baseline`] = { label: `deadbolt (${backend}), baseline build (BENCH_BASELINE)`, backend, make: (u) => deadbolt(u[backend], {}, loadBaseline), scenarios: [1, 2], compareTo: row, deadbolt: true }
  }
}
LIBS['deadbolt-redislock'].deadbolt = true
// bench/multi.js: backends of several servers; `probe` names the one server whose counters
// the worker's probe reads (only the client-side figures are reported for them).
for (const n of [3, 5]) {
  const b = `redlock${n}`
  const probe = (u) => u[b][0]
  LIBS[`deadbolt-redlock${n}`] = { label: `deadbolt, Redlock over ${n}`, backend: b, make: (u) => deadbolt(u[b]), scenarios: [1, 2, 3], deadbolt: true, probe }
  LIBS[`redlock-redlock${n}`] = { label: `redlock 4 over ${n} (ioredis)`, backend: b, make: (u) => redlockOver(u[b], false), scenarios: [1, 2, 3], probe }
  LIBS[`semaphore-redlock${n}`] = { label: `redis-semaphore 5 RedlockMutex over ${n}`, backend: b, make: (u) => redlockMutex(u[b]), scenarios: [1, 2, 3], probe }
}
LIBS['deadbolt-cluster'] = { label: 'deadbolt, Redis Cluster', backend: 'cluster', make: (u) => deadbolt({ cluster: u.cluster }), scenarios: [1, 2, 3], deadbolt: true, probe: (u) => u.cluster[0] }
LIBS['redlock-cluster'] = { label: 'redlock 4 on an ioredis Cluster', backend: 'cluster', make: (u) => redlockOver(u.cluster, true), scenarios: [1, 2, 3], probe: (u) => u.cluster[0] }

module.exports = { LIBS, SETTINGS, loadDeadbolt, deadboltFingerprint, dynamoTarget, loadedBuild: () => loadedBuild }
