'use strict'
// deadbolt/otel with the OpenTelemetry SDK's in-memory pieces: the spans and metrics README's
// table promises, on the embedded store.

const test = require('node:test')
const assert = require('node:assert/strict')
const { BasicTracerProvider, SimpleSpanProcessor, InMemorySpanExporter } = require('@opentelemetry/sdk-trace-base')
const { MeterProvider, MetricReader, AggregationTemporality } = require('@opentelemetry/sdk-metrics')
const { SpanStatusCode } = require('@opentelemetry/api')
const { connect } = require('..')
const { instrument, defaultLockName } = require('deadbolt/otel')
const { prefix, eventually, freePort } = require('./helpers')

/** A reader that hands over what it collects when asked. */
class TestReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE })
  }

  async onForceFlush() {}
  async onShutdown() {}
}

/** Instruments with fresh in-memory providers; returns { spans(), metric(name), locks }. */
async function setup(t, options = {}) {
  const exporter = new InMemorySpanExporter()
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
  const reader = new TestReader()
  const meterProvider = new MeterProvider({ readers: [reader] })
  const undo = instrument({ tracerProvider, meterProvider, ...options })
  const locks = await connect(`memory://otel-${prefix('m')}`)
  t.after(async () => {
    await locks.close()
    undo()
  })
  return {
    locks,
    undo,
    spans: () => exporter.getFinishedSpans(),
    /** The data points of metric `name`. */
    async metric(name) {
      const { resourceMetrics } = await reader.collect()
      for (const scope of resourceMetrics.scopeMetrics) {
        for (const m of scope.metrics) if (m.descriptor.name === name) return m.dataPoints
      }
      return []
    },
  }
}

const sum = (points, attrs = {}) => points
  .filter((p) => Object.entries(attrs).every(([k, v]) => p.attributes[k] === v))
  .reduce((s, p) => s + (typeof p.value === 'number' ? p.value : p.value.count), 0)

test('an acquisition is a lock.acquire span with its result and the lock attributes', async (t) => {
  const { locks, spans } = await setup(t)
  const key = prefix('otel') + 'order:42'
  const lock = await locks.acquire(key)
  const span = spans().find((s) => s.name === 'lock.acquire')
  assert.equal(span.attributes['deadbolt.result'], 'granted')
  assert.equal(span.attributes['deadbolt.store'], 'memory')
  assert.equal(span.attributes['deadbolt.lock.kind'], 'lock')
  assert.equal(span.attributes['deadbolt.lock.name'], defaultLockName(key))
  assert.equal(span.status.code, SpanStatusCode.UNSET)
  await lock.release()
})

test("deadbolt.store is the store's registry name, not the spelling of its scheme", async (t) => {
  const { spans } = await setup(t)
  const locks = await connect(`etcds://127.0.0.1:${await freePort()}`, { lazy: true, connectTimeout: 500 })
  t.after(() => locks.close())
  await assert.rejects(locks.acquire(prefix('otel') + 'down', { wait: 0 }))
  const span = spans().find((s) => s.name === 'lock.acquire')
  assert.equal(span.attributes['deadbolt.store'], 'etcd')
})

test('a timed-out acquisition is a lock.acquire span with an error status', async (t) => {
  const { locks, spans } = await setup(t)
  const key = prefix('otel') + 'busy'
  const held = await locks.acquire(key)
  await assert.rejects(locks.acquire(key, { wait: 10 }))
  const span = spans().find((s) => s.name === 'lock.acquire' && s.attributes['deadbolt.result'] === 'timeout')
  assert.equal(span.status.code, SpanStatusCode.ERROR)
  assert.equal(span.attributes['error.type'], 'ERR_LOCK_ACQUISITION')
  await held.release()
})

test('a hold is a lock.hold span from the grant to the release', async (t) => {
  const { locks, spans } = await setup(t)
  const lock = await locks.acquire(prefix('otel') + 'hold')
  assert.equal(spans().some((s) => s.name === 'lock.hold'), false)
  await lock.release()
  const hold = spans().find((s) => s.name === 'lock.hold')
  assert.equal(hold.status.code, SpanStatusCode.UNSET)
  assert.equal(hold.attributes['deadbolt.lock.fencing_token'], String(lock.fencingToken))
})

test('a lost lock ends its lock.hold span with an error status and counts in deadbolt.lock.lost', async (t) => {
  const { locks, spans, metric } = await setup(t)
  await locks.acquire(prefix('otel') + 'lost', { ttl: 30, onLost: () => {} })
  await eventually(() => spans().some((s) => s.name === 'lock.hold'), 5000, 'the hold span')
  const hold = spans().find((s) => s.name === 'lock.hold')
  assert.equal(hold.status.code, SpanStatusCode.ERROR)
  assert.equal(hold.attributes['error.type'], 'expired')
  assert.equal(sum(await metric('deadbolt.lock.lost'), { 'error.type': 'expired' }), 1)
})

test('deadbolt.lock.acquire.duration records each acquisition by result', async (t) => {
  const { locks, metric } = await setup(t)
  const key = prefix('otel') + 'dur'
  const lock = await locks.acquire(key)
  assert.equal(await locks.tryAcquire(key), null)
  const points = await metric('deadbolt.lock.acquire.duration')
  assert.equal(sum(points, { 'deadbolt.result': 'granted' }), 1)
  assert.equal(sum(points, { 'deadbolt.result': 'refused' }), 1)
  assert.equal(points.every((p) => p.attributes['deadbolt.store'] === 'memory' && p.attributes['deadbolt.lock.kind'] === 'lock'), true)
  await lock.release()
})

test('deadbolt.lock.hold.duration records each released hold', async (t) => {
  const { locks, metric } = await setup(t)
  await (await locks.acquire(prefix('otel') + 'h1')).release()
  await (await locks.acquire(prefix('otel') + 'h2')).release()
  assert.equal(sum(await metric('deadbolt.lock.hold.duration')), 2)
})

test('deadbolt.lock.held counts the locks this process holds', async (t) => {
  const { locks, metric } = await setup(t)
  const a = await locks.acquire(prefix('otel') + 'a')
  const b = await locks.acquire(prefix('otel') + 'b')
  assert.equal(sum(await metric('deadbolt.lock.held')), 2)
  await a.release()
  await b.release()
  assert.equal(sum(await metric('deadbolt.lock.held')), 0)
})

test('deadbolt.lock.pending counts the acquisitions waiting in this process', async (t) => {
  const { locks, metric } = await setup(t)
  const key = prefix('otel') + 'wait'
  const held = await locks.acquire(key)
  const waiting = locks.acquire(key, { wait: 60_000 })
  assert.equal(sum(await metric('deadbolt.lock.pending')), 1)
  await held.release()
  await (await waiting).release()
  assert.equal(sum(await metric('deadbolt.lock.pending')), 0)
})

test('deadbolt.lock.extensions counts extensions by result, heartbeats included', async (t) => {
  const { locks, metric } = await setup(t)
  const lock = await locks.acquire(prefix('otel') + 'ext', { ttl: 300, autoExtend: true, extendEvery: 20 })
  await lock.extend(300)
  await eventually(async () => sum(await metric('deadbolt.lock.extensions'), { 'deadbolt.result': 'extended' }) >= 3, 5000, 'heartbeats')
  await lock.release()
})

test('the default lock name replaces digit runs and UUIDs with *', () => {
  assert.equal(defaultLockName('order:1234:item-7'), 'order:*:item-*')
  assert.equal(defaultLockName('job:3f2a1b9c-1d2e-4f50-8a9b-0c1d2e3f4a5b'), 'job:*')
})

test('lockName names the locks in the attributes', async (t) => {
  const { locks, metric } = await setup(t, { lockName: () => 'all' })
  await (await locks.acquire(prefix('otel') + 'x')).release()
  const points = await metric('deadbolt.lock.acquire.duration')
  assert.deepEqual(points.map((p) => p.attributes['deadbolt.lock.name']), ['all'])
})

test('the function instrument returns stops the recording', async (t) => {
  const { locks, spans, undo } = await setup(t)
  undo()
  await (await locks.acquire(prefix('otel') + 'off')).release()
  assert.deepEqual(spans(), [])
})

test('instrument without providers uses the global ones (no-ops without an SDK)', async (t) => {
  const undo = instrument()
  t.after(undo)
  const locks = await connect(`memory://otel-${prefix('m')}`)
  await (await locks.acquire(prefix('otel') + 'global')).release()
  await locks.close()
})

test('instrument rejects a lockName that is not a function', () => {
  assert.throws(() => instrument({ lockName: 'x' }), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /"options\.lockName"/ })
})

test('instrument rejects options that are not an object', () => {
  for (const options of [null, 'tracer', 42]) {
    assert.throws(() => instrument(options), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /"options"/ }, String(options))
  }
})

test('instrument rejects a tracerProvider or meterProvider that is not a provider', () => {
  assert.throws(() => instrument({ tracerProvider: {} }), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /"options\.tracerProvider"/ })
  assert.throws(() => instrument({ meterProvider: 'prometheus' }), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /"options\.meterProvider"/ })
})

test('instrument rejects an option it does not know, naming the closest one', () => {
  assert.throws(() => instrument({ lockname: (k) => k }), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE', message: /Did you mean "lockName"\?/ })
})

test('a lock.hold span is linked to the lock.acquire span of its grant', async (t) => {
  const { locks, spans } = await setup(t)
  await (await locks.acquire(prefix('otel') + 'link')).release()
  const acquire = spans().find((s) => s.name === 'lock.acquire')
  const hold = spans().find((s) => s.name === 'lock.hold')
  assert.equal(hold.links.length, 1)
  assert.equal(hold.links[0].context.spanId, acquire.spanContext().spanId)
})

test('undoing the instrumentation ends the lock.hold spans still open', async (t) => {
  const { locks, spans, undo } = await setup(t)
  const lock = await locks.acquire(prefix('otel') + 'open')
  assert.equal(spans().some((s) => s.name === 'lock.hold'), false)
  undo()
  assert.equal(spans().some((s) => s.name === 'lock.hold'), true)
  await lock.release()
})

test('without @opentelemetry/api installed, instrument throws ERR_LOCK_OTEL_API_MISSING', () => {
  // A child process whose resolver cannot find the package, as in an app that did not install it.
  const script = `
    const Module = require('module')
    const resolve = Module._resolveFilename
    Module._resolveFilename = function (request, ...rest) {
      if (request === '@opentelemetry/api') throw Object.assign(new Error('not found'), { code: 'MODULE_NOT_FOUND' })
      return resolve.call(this, request, ...rest)
    }
    try {
      require('deadbolt/otel').instrument()
      console.log('no error')
    } catch (err) {
      console.log(err.code)
    }`
  const out = require('node:child_process').execFileSync(process.execPath, ['-e', script], { cwd: require('node:path').join(__dirname, '..'), encoding: 'utf8' })
  assert.equal(out.trim(), 'ERR_LOCK_OTEL_API_MISSING')
})

test('a lease its holder stopped extending lapses without counting as lost, and its hold span ends without error', async (t) => {
  const { locks, spans, metric } = await setup(t)
  const lock = await locks.acquire(prefix('otel') + 'handover', { ttl: 200, autoExtend: true, onLost: () => {} })
  assert.equal(lock.stopExtending(), true)
  await eventually(() => spans().some((s) => s.name === 'lock.hold'), 5000, 'the hold span')
  assert.equal(lock.held, false)
  assert.notEqual(spans().find((s) => s.name === 'lock.hold').status.code, SpanStatusCode.ERROR)
  assert.equal(sum(await metric('deadbolt.lock.lost')), 0)
})

test('an adopted lock counts in deadbolt.lock.held and has a lock.hold span until its release', async (t) => {
  const { locks, spans, metric } = await setup(t)
  const other = await connect(locks.toJSON().store)
  t.after(() => other.close())
  const key = prefix('otel') + 'adopted'
  const lock = await other.acquire(key, { ttl: 5000, autoExtend: true })
  lock.stopExtending()
  const before = sum(await metric('deadbolt.lock.held'))
  const adopted = await locks.adopt(key, { owner: lock.owner })
  assert.equal(sum(await metric('deadbolt.lock.held')), before + 1)
  await adopted.release()
  assert.equal(sum(await metric('deadbolt.lock.held')), before)
  const holds = spans().filter((s) => s.name === 'lock.hold' && s.attributes['deadbolt.lock.key'] === key)
  assert.equal(holds.length, 1)
})

test('a lockName that throws falls back to the default name and warns once, without crashing the process', async (t) => {
  const warnings = []
  const onWarning = (w) => { if (w.code === 'DEADBOLT_OTEL_LOCK_NAME') warnings.push(w) }
  process.on('warning', onWarning)
  t.after(() => process.off('warning', onWarning))
  const { locks, spans } = await setup(t, { lockName: () => { throw new Error('no name') } })
  const key = prefix('otel') + 'order:42'
  await (await locks.acquire(key)).release()
  await (await locks.acquire(key)).release()
  assert.equal(spans().find((s) => s.name === 'lock.acquire').attributes['deadbolt.lock.name'], defaultLockName(key))
  await eventually(() => warnings.length > 0, 5000, 'the warning')
  assert.equal(warnings.length, 1)
})

test('job runs are counted by result and timed', async (t) => {
  const { locks, metric } = await setup(t)
  const name = prefix('otel') + 'job'
  let enter
  const entered = new Promise((r) => { enter = r })
  let leave
  const left = new Promise((r) => { leave = r })
  const first = locks.runOnce(name, () => { enter(); return left })
  await entered
  await locks.runOnce(name, () => {})
  leave()
  await first
  await locks.runOnce(name, () => { throw new Error('boom') }).catch(() => {})
  const runs = await metric('deadbolt.job.runs')
  assert.equal(sum(runs, { 'deadbolt.result': 'ran', 'deadbolt.store': 'memory' }), 1)
  assert.equal(sum(runs, { 'deadbolt.result': 'skipped' }), 1)
  assert.equal(sum(runs, { 'deadbolt.result': 'failed' }), 1)
  assert.equal(sum(await metric('deadbolt.job.duration')), 2)
})
