'use strict'
// Property-based tests (fast-check) of every public function and option of the three faces.
// Each call must end in a typed error (TypeError/RangeError with ERR_INVALID_ARG_TYPE,
// ERR_INVALID_ARG_VALUE or ERR_OUT_OF_RANGE for bad input, a documented lock error otherwise)
// or in correct behaviour: never a crash, a hang or an untyped error. A small model of the
// documented rules says which inputs are bad. Bad input runs against a lazy client on a closed
// port as well as memory://: a LockBackendError there would mean I/O was attempted.
//
// The seed is fixed (FUZZ_SEED overrides it) and printed with any failure; to replay one
// counterexample, also pass the `path` fast-check prints (FUZZ_PATH).

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const fc = require('fast-check')
const deadbolt = require('..')
const { prefix, freePort } = require('./helpers')

const {
  connect, LockError, LockBackendError, LockClosedError, LockAcquisitionError, LockExtendError,
  createLock, setDefaults, getLock, transaction, initialize, DLMError,
} = deadbolt

const SEED = Number(process.env.FUZZ_SEED ?? 424242)
const MAX_MS = 2 ** 31 - 1
const MiB = 1024 * 1024
const HANG_MS = 3000

/** fast-check parameters: fixed seed, bounded runs, the seed in every failure report. */
function params(numRuns) {
  const p = { seed: SEED, numRuns, endOnFailure: true, interruptAfterTimeLimit: 8000, markInterruptAsFailure: false }
  if (process.env.FUZZ_PATH) p.path = process.env.FUZZ_PATH
  return p
}

async function check(property, numRuns) {
  try {
    await fc.assert(property, params(numRuns))
  } catch (err) {
    err.message = `fuzz seed ${SEED} (rerun with FUZZ_SEED=${SEED}):\n${err.message}`
    throw err
  }
}

// Leases that run out or are given up are expected here; their warnings are noise.
process.removeAllListeners('warning')

const run = prefix('fuzz')
let n = 0
const freshKey = () => `${run}${++n}`

/** A port that was just closed: nothing answers there. */
const closedPort = freePort

let deadUrl
let dead // lazy, nothing answers: any I/O fails with LockBackendError
let mem
let closed // closed memory client
before(async () => {
  deadUrl = `redis://127.0.0.1:${await closedPort()}`
  dead = await connect(deadUrl, { lazy: true, connectTimeout: 200, responseTimeout: 200 })
  mem = await connect(`memory://${run}`)
  closed = await connect(`memory://${run}closed`)
  await closed.close()
})
after(async () => {
  await dead.close()
  await mem.close()
  setDefaults({ timeout: 10000, retries: 0, delay: 50 })
})

// ───────────── outcomes ─────────────

const INPUT_CODES = { ERR_INVALID_ARG_TYPE: TypeError, ERR_INVALID_ARG_VALUE: TypeError, ERR_OUT_OF_RANGE: RangeError }

/**
 * A bad-input error of the documented kind; `name` (a string, or a list of which one will do),
 * if given, must be named in the message.
 */
function assertInputError(err, name) {
  assert.ok(err instanceof Error, `not an Error: ${String(err)}`)
  assert.ok(!(err instanceof LockBackendError), `I/O was attempted for bad input: ${err.message}`)
  const Class = INPUT_CODES[err.code]
  assert.ok(Class, `undocumented code ${err.code} (${err.name}: ${err.message})`)
  assert.ok(err instanceof Class, `${err.code} should be a ${Class.name}, got ${err.name}: ${err.message}`)
  const names = name === undefined ? [] : [name].flat()
  if (names.length > 0) assert.ok(names.some((x) => err.message.includes(x)), `"${err.message}" names none of ${names.join(', ')}`)
}

/** Settles `fn()` (sync or async) within HANG_MS: { ok, value } or { ok: false, error }. */
async function outcome(fn) {
  let timer
  const hang = new Promise((resolve) => { timer = setTimeout(() => resolve({ hang: true }), HANG_MS) })
  try {
    const settled = Promise.resolve().then(fn).then((value) => ({ ok: true, value }), (error) => ({ ok: false, error }))
    const r = await Promise.race([settled, hang])
    assert.ok(!r.hang, `the call did not settle within ${HANG_MS} ms`)
    return r
  } finally {
    clearTimeout(timer)
  }
}

async function expectInputError(fn, name) {
  const r = await outcome(fn)
  assert.ok(!r.ok, `bad input was accepted${name ? ` (${name})` : ''}`)
  assertInputError(r.error, name)
}

// ───────────── generators ─────────────

const ODD_STRINGS = [
  '', '\0', 'a\0b', '{}', '{x}', 'a{}b', '{x}y', 'k:fence', '{k}:fence', 'k:data', '{k}:data', 'k:released', '{k}:released',
  '\uD800', 'a\uDC00', 'x\uDFFFy', '\uD83D', '😀', '\u{10FFFF}', ' ', '\n', '%s', '__proto__', 'constructor', 'toString',
  'x'.repeat(1024), 'x'.repeat(1025), 'é'.repeat(512), 'é'.repeat(513), '😀'.repeat(256), '😀'.repeat(257),
]
const oddString = fc.oneof(
  fc.constantFrom(...ODD_STRINGS),
  fc.string(),
  fc.fullUnicodeString({ maxLength: 40 }),
  fc.string16bits({ maxLength: 20 }), // lone surrogates included
  fc.string({ minLength: 1000, maxLength: 1100 }),
)
const ODD_NUMBERS = [NaN, 0, -0, -1, 0.5, 1, 1.5, 2, 9.99, 2 ** 31 - 1, 2 ** 31, 1e22, 1e300, Number.MAX_VALUE, Number.MIN_VALUE,
  Infinity, -Infinity, 2 ** 53 + 1, Number.MAX_SAFE_INTEGER, -(2 ** 53)]
const oddNumber = fc.oneof(fc.constantFrom(...ODD_NUMBERS), fc.integer(), fc.double(), fc.integer({ min: 1, max: 100_000 }))
const notANumber = fc.oneof(
  fc.constantFrom(null, true, false, '10', '', 10n, [], {}, [5], Symbol('s'), () => 1, new Date(0), Object.create(null)),
  fc.string({ maxLength: 5 }),
)
/** Anything at all, with a bias to the odd. */
const anyValue = fc.oneof(oddString, oddNumber, notANumber, fc.constant(undefined), fc.anything({ maxDepth: 1 }))
const anyNumberish = fc.oneof({ weight: 3, arbitrary: oddNumber }, { weight: 1, arbitrary: notANumber }, { weight: 1, arbitrary: fc.constant(undefined) })

/**
 * Values that someone might put on Object.prototype; all of them must be ignored. Not `signal`:
 * with Object.prototype.signal set, Node's own addEventListener(type, fn, { once: true }) reads
 * it and throws, whoever calls it.
 */
const POLLUTION = { ttl: 1, wait: -1, retryDelay: 'x', jitter: 7, autoExtend: 'yes', extendEvery: 0.5, maxHold: -5, data: 42,
  onLost: 'x', connectTimeout: 'x', responseTimeout: -1, poolSize: 1.5, table: '!', lazy: 'x', timeout: 0,
  retries: -7, delay: -1, locking_ttl: 'x', onElected: 1, onRevoked: 1 }

/** Runs the synchronous part of `fn` with Object.prototype polluted, then awaits the result. */
function polluted(fn) {
  // eslint-disable-next-line no-extend-native
  for (const [k, v] of Object.entries(POLLUTION)) Object.prototype[k] = v
  let result
  try {
    result = fn()
  } catch (err) {
    result = Promise.reject(err)
  } finally {
    for (const k of Object.keys(POLLUTION)) delete Object.prototype[k]
  }
  return result
}

/**
 * An options object: some fields from `fields`, maybe with no prototype, or on a prototype full
 * of bad values (then not a plain object: refused as a whole).
 */
function optionsOf(fields) {
  const record = fc.record(fields, { requiredKeys: [] })
  return fc.tuple(record, fc.constantFrom('plain', 'badProto', 'nullProto')).map(([o, kind]) => {
    if (kind === 'plain') return o
    const base = kind === 'nullProto' ? Object.create(null) : Object.create({ ...POLLUTION })
    return Object.assign(base, o)
  })
}

// ───────────── the model of the documented rules ─────────────

const isInt = (x, min, max) => typeof x === 'number' && Number.isInteger(x) && x >= min && x <= max
const isDuration = (x) => typeof x === 'number' && ((x >= 0 && x <= MAX_MS) || x === Infinity)
const own = (o, k) => (Object.prototype.propertyIsEnumerable.call(o, k) ? o[k] : undefined)
/** Options must be a plain object: an object literal or one with a null prototype. */
const isPlain = (o) => o !== null && typeof o === 'object' && [Object.prototype, null].includes(Object.getPrototypeOf(o))

function keyProblem(key, name = 'key') {
  if (typeof key !== 'string' || key === '' || !key.isWellFormed() || Buffer.byteLength(key) > 1024) return name
  return null
}

function dataProblem(data) {
  if (typeof data === 'string') return data.isWellFormed() && Buffer.byteLength(data) <= MiB ? null : 'options.data'
  if (data instanceof Uint8Array) return data.byteLength <= MiB ? null : 'options.data'
  return 'options.data'
}

const isSignal = (s) => s !== null && typeof s === 'object' && typeof s.aborted === 'boolean' &&
  typeof s.addEventListener === 'function' && typeof s.removeEventListener === 'function'

/**
 * The names of the documented rules that `options` breaks (the error may name any one of
 * them: the order of the checks is not part of the contract); `d` are the call's defaults.
 */
const ACQUIRE_KEYS = ['ttl', 'wait', 'retryDelay', 'jitter', 'autoExtend', 'extendEvery', 'maxHold', 'data', 'signal', 'onLost']
const CONNECT_KEYS = ['ttl', 'retryDelay', 'jitter', 'connectTimeout', 'responseTimeout', 'table', 'poolSize', 'lazy', 'tls']

/** Whether `options` has an own enumerable key outside `known` (refused, naming `options`). */
const hasUnknownKey = (options, known) => Object.keys(options).some((k) => !known.includes(k))

function acquireProblems(options, d = { autoExtend: false }) {
  if (options === undefined || options === null) return []
  if (!isPlain(options)) return ['options']
  if (hasUnknownKey(options, ACQUIRE_KEYS)) return ['options']
  const problems = []
  const ttl = own(options, 'ttl') ?? 10_000
  if (!isInt(ttl, 1, MAX_MS)) problems.push('options.ttl')
  if (!isDuration(own(options, 'wait') ?? 0)) problems.push('options.wait')
  if (!isInt(own(options, 'retryDelay') ?? 50, 1, MAX_MS)) problems.push('options.retryDelay')
  const jitter = own(options, 'jitter') ?? 0.5
  if (typeof jitter !== 'number' || !(jitter >= 0 && jitter <= 1)) problems.push('options.jitter')
  const autoExtend = own(options, 'autoExtend') ?? d.autoExtend
  if (typeof autoExtend !== 'boolean') problems.push('options.autoExtend')
  const every = own(options, 'extendEvery')
  if (every !== undefined) {
    if (!isInt(every, 1, MAX_MS) || (isInt(ttl, 1, MAX_MS) && every >= ttl)) problems.push('options.extendEvery')
  } else if (autoExtend === true && ttl === 1) {
    problems.push('options.ttl')
  }
  const maxHold = own(options, 'maxHold') ?? Infinity
  if (!isDuration(maxHold) || (maxHold === 0 && autoExtend === true)) problems.push('options.maxHold')
  const data = own(options, 'data')
  if (data !== undefined && dataProblem(data)) problems.push('options.data')
  const signal = own(options, 'signal')
  if (signal !== undefined && !isSignal(signal)) problems.push('options.signal')
  const onLost = own(options, 'onLost')
  if (onLost !== undefined && typeof onLost !== 'function') problems.push('options.onLost')
  return problems
}

const acquireOptions = optionsOf({
  ttl: fc.oneof(anyNumberish, fc.integer({ min: 1000, max: 60_000 })),
  wait: fc.oneof(anyNumberish, fc.constantFrom(0, 0.5, 100, Infinity)),
  retryDelay: anyNumberish,
  jitter: fc.oneof(anyNumberish, fc.double({ min: 0, max: 1, noNaN: true })),
  autoExtend: fc.oneof(fc.boolean(), anyValue),
  extendEvery: anyNumberish,
  maxHold: fc.oneof(anyNumberish, fc.constantFrom(Infinity, MAX_MS)),
  data: fc.oneof(oddString, fc.uint8Array({ maxLength: 64 }), fc.constant(Buffer.from([0, 0x73, 0x62, 255])), anyValue),
  signal: fc.oneof(fc.constant(undefined), fc.constant(null), fc.constant({ aborted: false, addEventListener() {} }),
    fc.constant('signal'), fc.boolean().map((aborted) => (aborted ? AbortSignal.abort() : new AbortController().signal))),
  onLost: fc.oneof(fc.constant(() => {}), anyValue),
})

// ───────────── modern API ─────────────

test('every key argument of the modern API is either refused before I/O or a working lock', async () => {
  await check(fc.asyncProperty(fc.oneof(oddString, anyValue), fc.constantFrom('acquire', 'tryAcquire', 'withLock', 'inspect', 'leader', 'elect'), async (key, fn) => {
    const problem = keyProblem(key, fn === 'elect' ? 'name' : 'key')
    const call = (client) => {
      if (fn === 'withLock') return client.withLock(key, { ttl: 10_000 }, (lock) => lock.key)
      if (fn === 'elect') return client.elect(key, {})
      return client[fn](key)
    }
    if (problem !== null) {
      for (const client of [dead, mem, closed]) await expectInputError(() => call(client), problem)
      return
    }
    // A valid key may be held by an earlier run (the same odd string): make it fresh if it fits.
    const k = Buffer.byteLength(`${freshKey()}${key}`) <= 1024 ? `${freshKey()}${key}` : key
    const r = await outcome(() => (fn === 'withLock' ? mem.withLock(k, (lock) => lock.key)
      : fn === 'elect' ? mem.elect(k, {}).resign()
        : fn === 'inspect' || fn === 'leader' ? mem[fn](k) : mem[fn](k).then((lock) => lock.release())))
    assert.ok(r.ok, r.error?.stack)
    if (fn === 'withLock') assert.equal(r.value, k)
    if (fn === 'acquire' || fn === 'tryAcquire') assert.equal(r.value, true)
    if (fn === 'inspect' || fn === 'leader') assert.equal(r.value, null)
    // A closed client says so; it never attempts anything.
    const c = await outcome(() => call(closed))
    assert.ok(!c.ok && c.error instanceof LockClosedError, `closed client: ${c.error?.stack ?? 'accepted'}`)
  }), 300)
})

test('acquire options: bad ones are refused naming the option, good ones give a lock that inspect reports', async () => {
  await check(fc.asyncProperty(acquireOptions, fc.constantFrom('acquire', 'tryAcquire', 'withLock'), fc.boolean(), async (options, fn, pollute) => {
    const problem = acquireProblems(options, { autoExtend: fn === 'withLock' })
    const call = (client, k) => {
      const go = () => (fn === 'withLock' ? client.withLock(k, options, (lock) => lock) : client[fn](k, options))
      return pollute ? polluted(go) : go()
    }
    if (problem.length > 0) {
      await expectInputError(() => call(dead, freshKey()), problem)
      await expectInputError(() => call(mem, freshKey()), problem)
      return
    }
    const k = freshKey()
    const r = await outcome(() => call(mem, k))
    const signal = own(options, 'signal')
    if (signal?.aborted) {
      assert.ok(!r.ok && r.error === signal.reason, 'an aborted signal rejects with its reason')
      return
    }
    assert.ok(r.ok, r.error?.stack)
    const lock = r.value
    assert.ok(lock, `${fn} gave no lock for a free key`)
    const ttl = own(options, 'ttl') ?? 10_000
    assert.equal(lock.ttl, ttl)
    if (fn === 'withLock') {
      assert.equal(lock.held, false, 'withLock released the lock')
      return
    }
    if (ttl >= 1000 && lock.held) {
      const info = await mem.inspect(k)
      assert.equal(info.owner, lock.owner)
      assert.equal(info.fencingToken, lock.fencingToken)
      const data = own(options, 'data')
      if (typeof data === 'string') assert.equal(info.data, data)
      else if (data instanceof Uint8Array) assert.deepEqual(info.data, Buffer.from(data))
      else assert.equal(info.data, null)
      assert.equal(await mem.tryAcquire(k), null)
      assert.equal(await lock.release(), true)
      assert.equal(await mem.inspect(k), null)
    } else {
      assert.equal(typeof (await lock.release()), 'boolean')
    }
  }), 400)
})

test('options that are not objects are refused by acquire, tryAcquire, withLock and elect', async () => {
  await check(fc.asyncProperty(fc.oneof(oddString, oddNumber, fc.constantFrom(true, 10n, Symbol('o'))), async (options) => {
    for (const client of [dead, mem]) {
      await expectInputError(() => client.acquire(freshKey(), options), 'options')
      await expectInputError(() => client.tryAcquire(freshKey(), options), 'options')
      await expectInputError(() => client.withLock(freshKey(), options, () => {}), 'options')
      await expectInputError(() => client.elect(freshKey(), options), 'options')
    }
  }), 60)
})

test('withLock refuses a routine that is not a function, before any I/O', async () => {
  await check(fc.asyncProperty(anyValue.filter((x) => typeof x !== 'function'), async (fn) => {
    await expectInputError(() => dead.withLock(freshKey(), {}, fn), 'fn')
    await expectInputError(() => mem.withLock(freshKey(), {}, fn), 'fn')
  }), 60)
})

test('Lock#extend refuses a ttl that is not a whole number of ms in [1, 2^31-1] and keeps the lock', async () => {
  const k = freshKey()
  const lock = await mem.acquire(k, { ttl: 10_000 })
  try {
    await check(fc.asyncProperty(fc.oneof(anyNumberish, fc.integer({ min: 1000, max: 60_000 })), async (ttl) => {
      const valid = ttl === undefined || isInt(ttl, 1, MAX_MS)
      if (!valid) {
        await expectInputError(() => lock.extend(ttl), 'ttl')
        assert.equal(lock.held, true)
        return
      }
      if (ttl !== undefined && ttl < 1000) return // would let the lease run out under the test
      const r = await outcome(() => lock.extend(ttl))
      assert.ok(r.ok, r.error?.stack)
      const info = await mem.inspect(k)
      assert.ok(info.remainingMs <= (ttl ?? lock.ttl), `${info.remainingMs} > ${ttl}`)
    }), 150)
  } finally {
    await lock.release()
  }
})

test('elect options: bad ones throw naming the option, good ones campaign and resign', async () => {
  const electOptions = optionsOf({
    ttl: fc.oneof(anyNumberish, fc.integer({ min: 1000, max: 60_000 })),
    retryDelay: anyNumberish,
    data: fc.oneof(oddString, fc.uint8Array({ maxLength: 16 }), anyValue),
    onElected: fc.oneof(fc.constant(() => {}), anyValue),
    onRevoked: fc.oneof(fc.constant(() => {}), anyValue),
    signal: fc.oneof(fc.constant(undefined), fc.constant({ aborted: false, addEventListener() {} }), fc.constant(new AbortController().signal)),
  })
  await check(fc.asyncProperty(electOptions, async (options) => {
    const ttl = own(options, 'ttl') === undefined ? 5000 : options.ttl
    const fnProblem = ['onElected', 'onRevoked'].find((k) => own(options, k) !== undefined && typeof options[k] !== 'function')
    const problem = !isPlain(options) ? 'options' : !isInt(ttl, 2, MAX_MS) ? 'options.ttl'
      : fnProblem ? `options.${fnProblem}`
        : acquireProblems({ ttl, retryDelay: own(options, 'retryDelay') ?? undefined, data: own(options, 'data'), autoExtend: true })[0]
          ?? (own(options, 'signal') !== undefined && !isSignal(options.signal) ? 'options.signal' : null)
    if (problem !== null) {
      await expectInputError(() => dead.elect(freshKey(), options), problem)
      await expectInputError(() => polluted(() => mem.elect(freshKey(), options)), problem)
      return
    }
    const r = await outcome(async () => {
      const election = polluted(() => mem.elect(freshKey(), options))
      await election.resign()
      return election.isLeader
    })
    assert.ok(r.ok, r.error?.stack)
    assert.equal(r.value, false)
  }), 150)
})

// ───────────── connect ─────────────

function connectProblem(options) {
  if (options === undefined) return null
  if (!isPlain(options)) return 'options'
  if (hasUnknownKey(options, CONNECT_KEYS)) return 'options'
  const get = (k) => own(options, k)
  const checks = [
    ['ttl', (x) => isInt(x, 1, MAX_MS)], ['retryDelay', (x) => isInt(x, 1, MAX_MS)],
    ['jitter', (x) => typeof x === 'number' && x >= 0 && x <= 1],
    ['connectTimeout', (x) => isInt(x, 1, MAX_MS)], ['responseTimeout', (x) => isInt(x, 1, MAX_MS)],
    ['poolSize', (x) => isInt(x, 1, 1000)], ['lazy', (x) => typeof x === 'boolean'],
    ['table', (x) => typeof x === 'string' && /^[A-Za-z0-9_]{1,64}$/.test(x)],
  ]
  for (const [k, ok] of checks) if (get(k) !== undefined && !ok(get(k))) return `options.${k}`
  return null
}

test('connect options: bad ones are refused naming the option, before any I/O', async () => {
  const connectOptions = optionsOf({
    ttl: anyNumberish, retryDelay: anyNumberish, jitter: anyNumberish, connectTimeout: anyNumberish, responseTimeout: anyNumberish,
    poolSize: fc.oneof(anyNumberish, fc.integer({ min: 1, max: 1000 })), lazy: fc.oneof(fc.boolean(), anyValue),
    table: fc.oneof(oddString, fc.stringMatching(/^[A-Za-z0-9_]{1,64}$/)),
  })
  await check(fc.asyncProperty(fc.oneof({ weight: 9, arbitrary: connectOptions }, { weight: 1, arbitrary: anyValue }), fc.boolean(), async (options, pollute) => {
    const problem = connectProblem(options)
    const go = () => connect(deadUrl, !isPlain(options) ? options : { ...options, lazy: true })
    const r = await outcome(() => (pollute ? polluted(go) : go()))
    if (problem !== null && !(problem === 'options.lazy')) {
      assert.ok(!r.ok, `accepted: ${problem}`)
      assertInputError(r.error, problem)
      return
    }
    if (problem === 'options.lazy' || options === undefined) {
      // connect overrides lazy above only for objects; undefined options ping the dead server.
      if (!r.ok) assert.ok(r.error instanceof LockBackendError || INPUT_CODES[r.error.code], r.error.stack)
      if (r.ok) await r.value.close()
      return
    }
    assert.ok(r.ok, r.error?.stack)
    await r.value.close()
  }), 200)
})

test('connect URLs: anything that is not a usable URL is a TypeError, and memory:// names are free-form', async () => {
  await check(fc.asyncProperty(fc.oneof(anyValue, oddString.map((s) => `memory://${s}`), oddString.map((s) => `redis://${s}`),
    oddString.map((s) => `mysql://${s}`)), async (url) => {
    const r = await outcome(() => connect(url, { lazy: true }))
    if (r.ok) {
      assert.ok(typeof url === 'string' && url.isWellFormed(), 'accepted a URL that is not a well-formed string')
      await r.value.close()
      return
    }
    assertInputError(r.error)
  }), 200)
})

// ───────────── redislock face ─────────────

function redislockProblem(options) {
  if (!options) return null
  if (typeof options !== 'function' && !isPlain(options)) return 'options'
  const value = (k, d) => { const x = own(options, k); return x === undefined || x === null ? d : x }
  if (!isInt(value('timeout', 10000), 1, MAX_MS)) return 'timeout'
  const retries = value('retries', 0)
  if (typeof retries !== 'number' || !Number.isSafeInteger(retries) || retries < -1) return 'retries'
  if (!isInt(value('delay', 50), 0, MAX_MS)) return 'delay'
  return null
}

test('redislock createLock options: bad ones throw naming the option, good ones are kept as given', async () => {
  const options = fc.oneof({ weight: 9, arbitrary: optionsOf({ timeout: anyNumberish, retries: anyNumberish, delay: anyNumberish }) },
    { weight: 1, arbitrary: anyValue })
  await check(fc.asyncProperty(options, fc.boolean(), async (opts, pollute) => {
    const problem = redislockProblem(opts)
    const r = await outcome(() => (pollute ? polluted(() => createLock(deadUrl, opts)) : createLock(deadUrl, opts)))
    if (problem !== null) {
      assert.ok(!r.ok, `accepted: ${problem}`)
      assertInputError(r.error, problem)
      return
    }
    assert.ok(r.ok, r.error?.stack)
    const value = (k, d) => { const x = opts ? own(opts, k) : undefined; return x === undefined || x === null ? d : x }
    assert.deepEqual([r.value.timeout, r.value.retries, r.value.delay], [value('timeout', 10000), value('retries', 0), value('delay', 50)])
  }), 300)
})

test('redislock setDefaults: any input is refused with a typed error or leaves valid defaults', async () => {
  const options = fc.oneof({ weight: 9, arbitrary: optionsOf({ timeout: fc.oneof(anyNumberish, oddString), retries: anyNumberish, delay: anyNumberish }) },
    { weight: 1, arbitrary: anyValue })
  try {
    await check(fc.asyncProperty(options, async (opts) => {
      const before = createLock(deadUrl)
      const r = await outcome(() => polluted(() => setDefaults(opts)))
      const after = await outcome(() => createLock(deadUrl))
      assert.ok(after.ok, `setDefaults left defaults createLock refuses: ${after.error?.message}`)
      if (!r.ok) {
        assertInputError(r.error)
        assert.deepEqual([after.value.timeout, after.value.retries, after.value.delay], [before.timeout, before.retries, before.delay])
      }
      setDefaults({ timeout: 10000, retries: 0, delay: 50 })
    }), 300)
  } finally {
    setDefaults({ timeout: 10000, retries: 0, delay: 50 })
  }
})

let deadAttempts = 0
test('redislock acquire and extend: bad keys and times are refused before I/O', async () => {
  await check(fc.asyncProperty(fc.oneof(oddString, anyValue), fc.oneof(anyNumberish, fc.constant(null)), async (key, time) => {
    const lock = createLock(deadUrl)
    const problem = keyProblem(key)
    if (problem !== null) {
      await expectInputError(() => lock.acquire(key), problem)
    } else if (deadAttempts++ < 5) {
      // A valid key reaches the (dead) store: a refused connection costs ~150 ms, so only a few.
      const r = await outcome(() => lock.acquire(key))
      assert.ok(!r.ok && r.error instanceof LockAcquisitionError && r.error.cause instanceof LockBackendError, r.error?.stack)
    }
    const e = await outcome(() => lock.extend(time))
    assert.ok(!e.ok)
    // extend(fn) is extend(callback), as in redislock.
    if (time === undefined || time === null || typeof time === 'function' || isInt(time, 1, MAX_MS)) {
      assert.ok(e.error instanceof LockExtendError, e.error.stack)
    }
    else assertInputError(e.error, 'time')
  }), 200)
})

// ───────────── sql-lock face ─────────────

test('sql-lock getLock and transaction: bad keys, ttls and functions are invalid_parameters, good ones not_initialized', async () => {
  await check(fc.asyncProperty(fc.oneof(oddString, anyValue), fc.oneof(anyNumberish, fc.constant(null)), fc.oneof(fc.constant(() => 1), anyValue),
    async (key, ttl, fn) => {
      const ttlOk = ttl === undefined || ttl === null || isInt(ttl, 1, MAX_MS)
      const g = await outcome(() => getLock(key, ttl))
      assert.ok(!g.ok)
      assert.ok(g.error instanceof DLMError, g.error.stack)
      if (keyProblem(key) || !ttlOk) assertInputError(g.error, keyProblem(key) ?? 'ttl')
      else assert.equal(g.error.err_type, 'not_initialized')
      const t = await outcome(() => transaction(key, fn))
      assert.ok(!t.ok)
      assert.ok(t.error instanceof DLMError, t.error.stack)
      if (keyProblem(key) || typeof fn !== 'function') assertInputError(t.error)
      else assert.equal(t.error.err_type, 'not_initialized')
    }), 200)
})

test('sql-lock initialize: bad options are invalid_parameters before any I/O', async () => {
  const initOptions = optionsOf({
    locking_ttl: anyNumberish, poolSize: anyNumberish, connectTimeout: anyNumberish, retryDelay: anyNumberish,
    table: fc.oneof(oddString, fc.constant('deadbolt_fuzz')),
  })
  const uri = `mysql://root@127.0.0.1:${await closedPort()}/test`
  await check(fc.asyncProperty(fc.oneof({ weight: 9, arbitrary: initOptions }, { weight: 1, arbitrary: anyValue }), async (options) => {
    let problem = null
    if (options !== undefined && options !== null) {
      if (!isPlain(options)) problem = 'options'
      else if (!isInt(own(options, 'locking_ttl') ?? 10_000, 1, MAX_MS)) problem = 'options.locking_ttl'
      else problem = connectProblem({ poolSize: own(options, 'poolSize'), connectTimeout: own(options, 'connectTimeout'), retryDelay: own(options, 'retryDelay'), table: own(options, 'table') })
    }
    // Nothing answers on that port, and the MySQL pool waits out connectTimeout even for a
    // refused connection (5 s by default): valid options get a short one.
    const opts = problem === null && options !== undefined && options !== null
      ? Object.assign(Object.create(Object.getPrototypeOf(options)), options, { connectTimeout: 300 })
      : options
    const r = await outcome(() => polluted(() => initialize(uri, opts ?? { connectTimeout: 300 })))
    assert.ok(!r.ok, 'nothing answers on that port')
    assert.ok(r.error instanceof DLMError, r.error.stack)
    if (problem !== null) {
      assertInputError(r.error, problem)
    } else {
      assert.equal(r.error.err_type, 'initialization_failed', r.error.stack)
      assert.ok(r.error.cause instanceof LockError, 'the cause is the store error')
    }
  }), 60)
})
