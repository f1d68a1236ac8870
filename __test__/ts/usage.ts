// Compiled by __test__/types.test.js with `tsc --strict`, then run: the typings must accept
// real use (including `await using`) and refuse wrong calls, and the emitted code must work.
import assert = require('node:assert/strict')
import deadbolt = require('../..')
import { connect, LockAcquisitionError, MultiLock, type Lock, type LockInfo } from '../..'
import { Mutex as RsMutex, RedlockSemaphore, LostLockError, TimeoutError, type LockOptions } from '../../redis-semaphore'

async function main(): Promise<void> {
  const locks = await connect('memory://types-test', { ttl: 2_000 })
  const key = `types:${process.pid}`
  {
    await using lock = await locks.acquire(key, { wait: 1_000, data: 'host-a' })
    const token: bigint = lock.fencingToken
    assert.equal(typeof token, 'bigint')
    const info: LockInfo | null = await locks.inspect(key)
    assert.equal(info?.data, 'host-a')
  }
  // `await using` released it when the block ended.
  assert.equal(await locks.inspect(key), null)

  const maybe: Lock | null = await locks.tryAcquire(key)
  assert.ok(maybe)
  const busy = await locks.tryAcquire(key)
  assert.equal(busy, null)
  await maybe.release()

  const n: number = await locks.withLock(key, async (l) => (l.held ? 1 : 0))
  assert.equal(n, 1)

  try {
    const holder = await locks.acquire(key)
    await locks.acquire(key, { wait: 10 }).finally(() => holder.release())
  } catch (err) {
    assert.ok(err instanceof LockAcquisitionError)
    assert.equal(err.code, 'ERR_LOCK_ACQUISITION')
    const json: deadbolt.LockErrorJSON = err.toJSON()
    assert.equal(json.code, 'ERR_LOCK_ACQUISITION')
  }
  const protocol: deadbolt.StoreErrorCode = 'ERR_LOCK_STORE_PROTOCOL'
  assert.ok(protocol)

  // The local deadline, and Redlock's form of connect (lazy: no servers needed to type-check).
  const timed = await locks.acquire(key)
  const until: number | null = timed.validUntil
  assert.ok(until !== null && until > Date.now())
  await timed.release()
  assert.equal(timed.validUntil, null)
  const servers: deadbolt.RedlockServers = ['redis://127.0.0.1:1', 'redis://127.0.0.1:2', 'redis://127.0.0.1:3']
  await (await connect(servers, { lazy: true })).close()
  // @ts-expect-error the servers are URLs
  await connect([6379]).catch(() => {})
  await (await connect({ cluster: ['redis://127.0.0.1:1'] }, { lazy: true })).close()
  // @ts-expect-error the seeds are a list
  await connect({ cluster: 'redis://127.0.0.1:1' }).catch(() => {})
  const sentinel: deadbolt.RedisSentinelTarget = { sentinels: ['redis://127.0.0.1:1'], name: 'mymaster', waitReplicas: 1 }
  await (await connect(sentinel, { lazy: true })).close()
  // @ts-expect-error the name is required
  await connect({ sentinels: ['redis://127.0.0.1:1'] }).catch(() => {})
  {
    await using outer = await locks.acquire(key, { reentrant: true })
    const inner: Lock = await locks.acquire(key, { reentrant: true })
    assert.equal(inner.fencingToken, outer.fencingToken)
    await inner.release()
  }
  {
    await using set = await locks.acquireAll([`${key}:a`, `${key}:b`] as const, { wait: 1_000 })
    assert.ok(set instanceof MultiLock)
    const tokens: bigint[] = set.locks.map((l) => l.fencingToken)
    assert.equal(tokens.length, 2)
  }
  {
    // fencing: false types the lock's token as null, and only there.
    await using bare = await locks.acquire(`${key}:bare`, { fencing: false })
    const none: null = bare.fencingToken
    assert.equal(none, null)
    const unfenced: deadbolt.UnfencedLock | null = await locks.tryAcquire(`${key}:bare2`, { fencing: false })
    assert.ok(unfenced)
    await unfenced.release()
    // @ts-expect-error a lock taken without a token has none to give
    const wrong: bigint = bare.fencingToken
    void wrong
    // @ts-expect-error semaphores always have tokens
    await locks.semaphore(`${key}:sem0`, { limit: 1 }).tryAcquire({ fencing: false }).catch(() => {})
  }
  // @ts-expect-error acquireAll takes an array of keys
  await locks.acquireAll(key).catch(() => {})
  {
    const sem: deadbolt.Semaphore = locks.semaphore(`${key}:sem`, { limit: 3 })
    await using permit = await sem.acquire({ permits: 2, wait: 1_000 })
    const n: number = permit.permits
    assert.equal(n, 2)
    assert.equal(await sem.permits(), 2)
    const free: deadbolt.Permit | null = await sem.tryAcquire({ permits: 2 })
    assert.equal(free, null)
    // @ts-expect-error a permit carries no payload
    await sem.acquire({ data: 'x' }).catch(() => {})
    const rw = locks.readWriteLock(`${key}:rw`)
    const mode: 'read' | 'write' = await rw.withRead(async (h) => h.mode)
    assert.equal(mode, 'read')
    // Every returned shape has a typed toJSON, tokens as decimal strings.
    const permitJson: deadbolt.PermitJSON = permit.toJSON()
    assert.equal(permitJson.fencingToken, String(permit.fencingToken))
    const holders: deadbolt.PermitHolderJSON[] = (await sem.holders()).map((h) => h.toJSON())
    assert.equal(holders[0]?.fencingToken, String(permit.fencingToken))
    const holdMode: 'read' | 'write' = await rw.withRead(async (h) => h.toJSON().mode)
    assert.equal(holdMode, 'read')
    // @ts-expect-error a read-write hold's JSON has its mode, not a count of permits
    await rw.withRead(async (h) => h.toJSON().permits)
  }
  {
    await using held = await locks.acquire(`${key}:json`)
    const json: deadbolt.LockJSON = held.toJSON()
    const token: string | null = json.fencingToken
    assert.equal(token, String(held.fencingToken))
    const info: deadbolt.LockInfoJSON | undefined = (await locks.inspect(`${key}:json`))?.toJSON()
    assert.equal(info?.fencingToken, token)
    // @ts-expect-error the JSON's token is a string, not a bigint
    const big: bigint = json.fencingToken
    void big
  }
  // @ts-expect-error a semaphore needs a limit
  assert.throws(() => locks.semaphore(`${key}:sem2`))
  {
    // The Web Locks API: the callback's result comes back typed; ifAvailable may call back null.
    const token: bigint = await locks.request(`${key}:web`, async (lock: deadbolt.WebLock) => lock.fencingToken)
    const mode: deadbolt.WebLockMode | null = await locks.request(`${key}:web`, { mode: 'shared', ifAvailable: true }, (lock) => lock?.mode ?? null)
    assert.equal(mode, 'shared')
    assert.equal(typeof token, 'bigint')
    const snapshot: deadbolt.WebLockSnapshot = await locks.query()
    assert.ok(Array.isArray(snapshot.held) && Array.isArray(snapshot.pending))
    // @ts-expect-error the modes are the Web Locks API's
    await locks.request(`${key}:web`, { mode: 'read' }, () => {}).catch(() => {})
    // Handing a lock over: stop extending it, adopt it by its owner.
    const lock = await locks.acquire(`${key}:adopt`, { ttl: 5_000 })
    const stopped: boolean = lock.stopExtending()
    assert.equal(stopped, true)
    const adopted: deadbolt.Lock | null = await locks.adopt(`${key}:adopt`, { owner: lock.owner, autoExtend: true })
    assert.ok(adopted !== null && adopted.fencingToken > lock.fencingToken, 'a new, higher token')
    await adopted?.release()
    const unfenced = await locks.acquire(`${key}:adopt`, { ttl: 5_000, fencing: false })
    unfenced.stopExtending()
    const adoptedUnfenced: deadbolt.UnfencedLock | null = await locks.adopt(`${key}:adopt`, { owner: unfenced.owner, fencing: false })
    assert.equal(adoptedUnfenced?.fencingToken, null)
    await adoptedUnfenced?.release()
    // @ts-expect-error adopt needs the owner
    await locks.adopt(`${key}:adopt`, {}).catch(() => {})
    const hold: deadbolt.RwHold | null = await locks.readWriteLock(`${key}:rw2`).adopt({ owner: 'nobody' })
    const permit: deadbolt.Permit | null = await locks.semaphore(`${key}:sem3`, { limit: 1 }).adopt({ owner: 'nobody' })
    assert.equal(hold ?? permit, null)
  }

  // The redislock face, typed too.
  const legacy = deadbolt.createLock('redis://127.0.0.1:6379', { timeout: 1_000, retries: -1, delay: 10 })
  const id: string = legacy._id
  assert.equal(typeof id, 'string')
  const legacyJson: deadbolt.RedisLockJSON = legacy.toJSON()
  assert.deepEqual([legacyJson._id, legacyJson.fencingToken], [id, null])
  const tokenless = deadbolt.createLock('redis://127.0.0.1:6379', { fencing: false })
  const fencing: boolean = tokenless.fencing
  assert.equal(fencing, false)
  // @ts-expect-error fencing is a boolean
  assert.throws(() => deadbolt.createLock('redis://127.0.0.1:6379', { fencing: 'no' }))

  // The redis-semaphore face, typed too (over a stand-in client: no I/O to a server).
  const rsClient = { set: async () => 'OK', eval: async () => 1, evalsha: async () => 1 }
  const rsOptions: LockOptions = { lockTimeout: 1_000, acquireAttemptsLimit: 1, onLockLost(this: unknown, err: LostLockError) { assert.equal(err.code, 'ERR_LOCK_LOST') } }
  const rsMutex = new RsMutex(rsClient, key, rsOptions)
  await rsMutex.acquire()
  const rsHeld: boolean = rsMutex.isAcquired
  assert.equal(rsHeld, true)
  await rsMutex.release()
  assert.ok(new TimeoutError('x') instanceof LockAcquisitionError)
  // @ts-expect-error a Redlock lock takes an array of clients
  assert.throws(() => new RedlockSemaphore(rsClient, key, 2))

  // @ts-expect-error the key must be a string
  await locks.acquire(42).catch(() => {})
  // @ts-expect-error ttl is a number
  await locks.acquire(key, { ttl: '10' }).catch(() => {})
  // @ts-expect-error unknown option
  await locks.acquire(key, { ttlMs: 10 }).catch(() => {})

  // TLS options type-check as Node's do; bad material is refused before any I/O.
  const tls: deadbolt.TlsOptions = { ca: [Buffer.from(''), 'pem'], cert: 'pem', key: Buffer.from(''), rejectUnauthorized: true }
  await connect('memory://types-tls', { tls }).then(() => assert.fail('accepted'), (err: NodeJS.ErrnoException) => assert.equal(err.code, 'ERR_INVALID_ARG_VALUE'))
  // @ts-expect-error rejectUnauthorized is a boolean
  await connect('memory://types-tls', { tls: { rejectUnauthorized: 'no' } }).catch(() => {})

  // Scheduled jobs: the context, the run record, the job.
  const once = await locks.runOnce(`${key}:job`, async (ctx: deadbolt.JobContext) => {
    ctx.assertLocked()
    deadbolt.assertLocked()
    const t: bigint = ctx.fencingToken
    return ctx.signal.aborted ? 0 : Number(t > 0n)
  }, { atMostFor: 5_000, atLeastFor: 0, tick: new Date(0) })
  const ran: boolean = once.ran
  const one: number | undefined = once.result
  assert.deepEqual([ran, one], [true, 1])
  const runs: deadbolt.JobRun[] = await locks.jobs({ prefix: key })
  const outcome: deadbolt.JobOutcome = runs[0].outcome
  assert.equal(outcome, 'ran')
  const job: deadbolt.Job = locks.schedule(`${key}:every`, { every: 60_000 }, () => {}, { timezone: undefined, onError: (err) => console.error(err) })
  const next: Date | null = job.nextRun
  assert.ok(next instanceof Date)
  await job.stop()
  // @ts-expect-error when is a cron string, a number or { every }
  assert.throws(() => locks.schedule('j', { cron: '* * * * *' }, () => {}))
  // @ts-expect-error atLeastFor is a number
  assert.throws(() => locks.schedule('j', '* * * * *', () => {}, { atLeastFor: '1s' }))
  await locks.forceRelease(`__deadbolt.jobs/${key}:job`)

  await locks.close()
  console.log('ok')
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
