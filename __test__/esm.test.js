'use strict'
// deadbolt as a consumer sees it: imported by name from a project whose node_modules/deadbolt
// is this checkout (a symlink), so every resolution goes through package.json's `exports` map
// (never a relative path). ESM and CommonJS entries, the redislock and sql-lock subpaths, the
// typings under `tsc` (module nodenext and commonjs), and loading where the globals that old
// test runners' sandboxes lack are missing.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
const { createRequire } = require('node:module')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { pathToFileURL } = require('node:url')

const ROOT = path.join(__dirname, '..')
const pkg = require('../package.json')

/** A throwaway project with node_modules/deadbolt → this checkout; removed after the test. */
function consumer(t, files = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-consumer-'))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.mkdirSync(path.join(dir, 'node_modules'))
  fs.symlinkSync(ROOT, path.join(dir, 'node_modules', 'deadbolt'), 'dir')
  // For tsc: `types: ["node"]`.
  fs.symlinkSync(path.join(ROOT, 'node_modules', '@types'), path.join(dir, 'node_modules', '@types'), 'dir')
  for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), text)
  return dir
}

/** The package's entries, loaded by name from `dir`: each by require and by import. */
async function entries(dir) {
  const req = createRequire(path.join(dir, 'index.js'))
  fs.writeFileSync(path.join(dir, 'probe.mjs'), [
    "export * as root from 'deadbolt'",
    "export * as redislock from 'deadbolt/redislock'",
    "export * as sqlLock from 'deadbolt/sql-lock'",
    "export * as otel from 'deadbolt/otel'",
  ].join('\n'))
  const esm = await import(pathToFileURL(path.join(dir, 'probe.mjs')).href)
  return {
    cjs: { root: req('deadbolt'), redislock: req('deadbolt/redislock'), sqlLock: req('deadbolt/sql-lock'), otel: req('deadbolt/otel') },
    esm,
  }
}

function run(file, cwd) {
  try {
    return execFileSync(process.execPath, [file], { cwd, encoding: 'utf8' })
  } catch (err) {
    assert.fail(`${file}: ${err.stdout ?? ''}${err.stderr ?? ''}`)
  }
}

function tsc(project) {
  try {
    execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', project], { encoding: 'utf8' })
  } catch (err) {
    assert.fail(`tsc -p ${project}:\n${err.stdout ?? ''}${err.stderr ?? ''}`)
  }
}

/** The ESM namespace's names, without `default`. */
function named(ns) {
  return Object.keys(ns).filter((k) => k !== 'default').sort()
}

test('every runtime export of the CommonJS entry is also a named export of the ESM entry', async (t) => {
  const { cjs, esm } = await entries(consumer(t))
  assert.deepEqual(named(esm.root), Object.keys(cjs.root).sort())
  for (const name of Object.keys(cjs.root)) assert.equal(esm.root[name], cjs.root[name], name)
})

test('the ESM default export is the CommonJS module object, so import and require share one state', async (t) => {
  const { cjs, esm } = await entries(consumer(t))
  assert.equal(esm.root.default, cjs.root)
  assert.equal(esm.redislock.default, cjs.redislock)
  assert.equal(esm.sqlLock.default, cjs.sqlLock)
  assert.equal(esm.otel.default, cjs.otel)
})

test('deadbolt/otel exports instrument and defaultLockName, by require and by import', async (t) => {
  const { cjs, esm } = await entries(consumer(t))
  assert.deepEqual(Object.keys(cjs.otel).sort(), ['defaultLockName', 'instrument'])
  assert.deepEqual(named(esm.otel), ['defaultLockName', 'instrument'])
  assert.equal(esm.otel.instrument, cjs.otel.instrument)
})

test("deadbolt/redislock exports exactly redislock 1.3's names, by require and by import", async (t) => {
  const { cjs, esm } = await entries(consumer(t))
  const original = Object.keys(require('redislock')).sort()
  assert.deepEqual(Object.keys(cjs.redislock).sort(), original)
  assert.deepEqual(named(esm.redislock), original)
  // The same functions and classes as the root's: one defaults table, one set of held locks.
  for (const name of original) {
    assert.equal(cjs.redislock[name], cjs.root[name], name)
    assert.equal(esm.redislock[name], cjs.root[name], name)
  }
})

test("deadbolt/sql-lock exports sql-lock 0.1.3's names plus close, DLMError and DLMErrorTypes", async (t) => {
  const { cjs, esm } = await entries(consumer(t))
  const expected = [...Object.keys(require('sql-lock')), 'close', 'DLMError', 'DLMErrorTypes'].sort()
  assert.deepEqual(Object.keys(cjs.sqlLock).sort(), expected)
  assert.deepEqual(named(esm.sqlLock), expected)
  for (const name of expected) {
    assert.equal(cjs.sqlLock[name], cjs.root[name], name)
    assert.equal(esm.sqlLock[name], cjs.root[name], name)
  }
})

/** Every file path named by the `exports` map, with main and types. */
function exportedFiles() {
  const out = new Set([pkg.main, pkg.types])
  const walk = (v) => {
    if (typeof v === 'string') out.add(path.normalize(v))
    else for (const x of Object.values(v)) walk(x)
  }
  walk(pkg.exports)
  return [...out].map((f) => path.normalize(f))
}

/** The files `files` in package.json ships (directories walked). */
function shippedFiles() {
  const out = []
  const walk = (rel) => {
    const abs = path.join(ROOT, rel)
    if (fs.statSync(abs).isDirectory()) {
      for (const e of fs.readdirSync(abs)) walk(path.join(rel, e))
    } else {
      out.push(path.normalize(rel))
    }
  }
  // Globs (deadbolt.*.node: a binary built here) name no source file.
  for (const f of pkg.files.filter((f) => !f.includes('*'))) walk(f)
  return out
}

test("every file the exports map, main and types name exists and is in package.json's files", () => {
  const shipped = new Set(shippedFiles())
  for (const f of exportedFiles()) {
    if (f === 'package.json') continue
    assert.ok(fs.existsSync(path.join(ROOT, f)), `${f} is missing`)
    assert.ok(shipped.has(f), `${f} is not shipped: add it to "files"`)
  }
})

test('no shipped JavaScript file uses a node: specifier (jest 25/26 cannot resolve them)', () => {
  const offenders = []
  for (const f of shippedFiles().filter((f) => /\.[cm]?js$/.test(f))) {
    const text = fs.readFileSync(path.join(ROOT, f), 'utf8')
    if (/(\brequire\s*\(|\bfrom\s+|\bimport\s*\()\s*['"]node:/.test(text)) offenders.push(f)
  }
  assert.deepEqual(offenders, [])
})

test('the package loads and locks with performance, AbortController, AbortSignal, EventTarget and structuredClone deleted', (t) => {
  // What jest 25/26's node environment lacks; a lock's signal and an election still work.
  const dir = consumer(t, {
    'bare.js': `
      for (const name of ['performance', 'AbortController', 'AbortSignal', 'EventTarget', 'structuredClone']) {
        delete globalThis[name]
        if (name in globalThis) throw new Error(name + ' is still there')
      }
      const assert = require('assert')
      const { connect } = require('deadbolt')
      require('deadbolt/redislock')
      require('deadbolt/sql-lock')
      ;(async () => {
        const locks = await connect('memory://bare-globals')
        const lock = await locks.acquire('k', { ttl: 5000 })
        assert.equal(lock.held, true)
        assert.equal(lock.signal.aborted, false)
        assert.equal(await lock.release(), true)
        assert.equal(await locks.inspect('k'), null)
        const election = locks.elect('leader', { ttl: 1000 })
        await election.resign()
        await locks.close()
        console.log('ok')
      })().catch((err) => { console.error(err); process.exit(1) })
    `,
  })
  assert.equal(run('bare.js', dir).trim(), 'ok')
})

const TS_LIB = ['ES2022', 'ESNext.Disposable']

test('a strict TypeScript program compiles and runs under module nodenext, as ESM and as CommonJS', (t) => {
  const names = Object.keys(require('..'))
  const dir = consumer(t, {
    'package.json': JSON.stringify({ private: true }),
    'tsconfig.json': JSON.stringify({
      compilerOptions: { target: 'ES2022', module: 'nodenext', moduleResolution: 'nodenext', lib: TS_LIB, types: ['node'], strict: true, noEmitOnError: true, skipLibCheck: false },
      files: ['esm.mts', 'cjs.cts'],
    }),
    // Every runtime name of the root, imported by name: each must be typed for ESM.
    'esm.mts': `
      import assert from 'node:assert/strict'
      import { ${names.join(', ')} } from 'deadbolt'
      import deadbolt, { type LockInfo } from 'deadbolt'
      import redislock, { createLock as legacyCreateLock, type RedisLock } from 'deadbolt/redislock'
      import * as redislockNs from 'deadbolt/redislock'
      import sqlLock, { getLock as legacyGetLock, type LockReleaser } from 'deadbolt/sql-lock'
      import otel, { instrument, type InstrumentOptions } from 'deadbolt/otel'
      import type { AcquireContext, LostMessage } from 'deadbolt'

      void [${names.join(', ')}]
      assert.equal(deadbolt.connect, connect)
      assert.equal(redislock.createLock, legacyCreateLock)
      assert.equal(sqlLock.getLock, legacyGetLock)
      const make: (c: string) => RedisLock = redislock.createLock
      void make
      const releaser: ((key: string) => Promise<LockReleaser>) = sqlLock.getLock
      void releaser
      // @ts-expect-error the redislock subpath has redislock's shape only
      void redislockNs.connect
      const otelOptions: InstrumentOptions = { lockName: (key) => key.split(':')[0] }
      assert.equal(otel.instrument, instrument)
      instrument(otelOptions)()
      // @ts-expect-error lockName maps a key to a string
      void ({ lockName: 42 } satisfies InstrumentOptions)
      const onAcquire = (ctx: AcquireContext): string => \`\${ctx.kind} \${ctx.key} \${ctx.result ?? ''}\`
      const onLost = (m: LostMessage): string => m.cause + m.error.code
      void [onAcquire, onLost]
      // @ts-expect-error the default export has no \`default\` of its own
      void deadbolt.default

      const locks = await connect('memory://ts-esm')
      {
        await using lock = await locks.acquire('k', { ttl: 2_000 })
        const token: bigint = lock.fencingToken
        assert.equal(typeof token, 'bigint')
        const info: LockInfo | null = await locks.inspect('k')
        assert.ok(info)
      }
      const maybe: Lock | null = await locks.tryAcquire('k')
      assert.ok(maybe)
      await maybe.release()
      // @ts-expect-error the key must be a string
      await locks.acquire(42).catch(() => {})
      await locks.close()
      assert.ok(new LockAcquisitionError('x') instanceof LockError)
      console.log('ok')
    `,
    'cjs.cts': `
      import assert = require('node:assert/strict')
      import deadbolt = require('deadbolt')
      import { connect, type Lock } from 'deadbolt'
      import redislock = require('deadbolt/redislock')
      import sqlLock = require('deadbolt/sql-lock')

      assert.equal(deadbolt.connect, connect)
      assert.equal(redislock.createLock, deadbolt.createLock)
      assert.equal(sqlLock.DLMErrorTypes, deadbolt.DLMErrorTypes)
      // @ts-expect-error the sql-lock subpath has sql-lock's shape only
      void sqlLock.connect
      async function main(): Promise<void> {
        const locks = await connect('memory://ts-cjs')
        const lock: Lock = await locks.acquire('k')
        assert.equal(await lock.release(), true)
        await locks.close()
        console.log('ok')
      }
      main().catch((err) => { console.error(err); process.exit(1) })
    `,
  })
  tsc(path.join(dir, 'tsconfig.json'))
  assert.equal(run('esm.mjs', dir).trim(), 'ok')
  assert.equal(run('cjs.cjs', dir).trim(), 'ok')
})

test('a strict TypeScript program compiles and runs under module commonjs, subpaths included', (t) => {
  const dir = consumer(t, {
    'tsconfig.json': JSON.stringify({
      compilerOptions: { target: 'ES2022', module: 'commonjs', lib: TS_LIB, types: ['node'], strict: true, esModuleInterop: true, noEmitOnError: true, skipLibCheck: false },
      files: ['usage.ts'],
    }),
    'usage.ts': `
      import assert = require('node:assert/strict')
      import deadbolt = require('deadbolt')
      import { connect, initialize, LockAcquisitionError, type RedislockOptions } from 'deadbolt'
      import redislock = require('deadbolt/redislock')
      import sqlLock from 'deadbolt/sql-lock'
      import { transaction } from 'deadbolt/sql-lock'

      assert.equal(deadbolt.initialize, initialize)
      assert.equal(sqlLock.transaction, transaction)
      assert.equal(redislock.LockAcquisitionError, LockAcquisitionError)
      const options: RedislockOptions = { timeout: 1_000, retries: -1, delay: 10 }
      const lock = redislock.createLock('redis://127.0.0.1:6379', options)
      const id: string = lock._id
      assert.equal(typeof id, 'string')
      // @ts-expect-error timeout is a number
      assert.throws(() => redislock.setDefaults({ timeout: 'soon' }), RangeError)
      // @ts-expect-error the redislock subpath has redislock's shape only
      void redislock.initialize
      async function main(): Promise<void> {
        const locks = await connect('memory://ts-commonjs')
        const n: number = await locks.withLock('k', async (l) => (l.held ? 1 : 0))
        assert.equal(n, 1)
        await locks.close()
        console.log('ok')
      }
      main().catch((err) => { console.error(err); process.exit(1) })
    `,
  })
  tsc(path.join(dir, 'tsconfig.json'))
  assert.equal(run('usage.js', dir).trim(), 'ok')
})

test("deadbolt/redis-semaphore exports exactly redis-semaphore 5.8's names and is typed for ESM and CommonJS", async (t) => {
  const original = Object.keys(require('redis-semaphore')).sort()
  const dir = consumer(t, {
    'package.json': JSON.stringify({ private: true }),
    'probe.mjs': "export * as face from 'deadbolt/redis-semaphore'",
    'tsconfig.json': JSON.stringify({
      compilerOptions: { target: 'ES2022', module: 'nodenext', moduleResolution: 'nodenext', lib: TS_LIB, types: ['node'], strict: true, noEmitOnError: true, skipLibCheck: false },
      files: ['esm.mts', 'cjs.cts'],
    }),
    'esm.mts': `
      import assert from 'node:assert/strict'
      import redisSemaphore, { Mutex, MultiSemaphore, LostLockError, type LockOptions } from 'deadbolt/redis-semaphore'
      const client = { set: async () => 'OK', eval: async () => 1, evalsha: async () => 1 }
      const options: LockOptions = { lockTimeout: 1_000, onLockLost(err: LostLockError) { assert.equal(err.code, 'ERR_LOCK_LOST') } }
      const mutex = new Mutex(client, 'k', options)
      const taken: boolean = await mutex.tryAcquire()
      assert.equal(taken, true)
      await mutex.release()
      assert.equal(redisSemaphore.Mutex, Mutex)
      // @ts-expect-error permits is a number
      assert.throws(() => new MultiSemaphore(client, 'k', 3, '2'))
      console.log('ok')
    `,
    'cjs.cts': `
      import assert = require('node:assert/strict')
      import redisSemaphore = require('deadbolt/redis-semaphore')
      const sem = new redisSemaphore.Semaphore({ sendCommand: async () => 1 }, 'k', 2)
      const id: string = sem.identifier
      assert.equal(typeof id, 'string')
      // @ts-expect-error the clients of a Redlock lock are an array
      assert.throws(() => new redisSemaphore.RedlockMutex({ sendCommand: async () => 1 }, 'k'))
      console.log('ok')
    `,
  })
  const req = createRequire(path.join(dir, 'index.js'))
  const cjs = req('deadbolt/redis-semaphore')
  const esm = (await import(pathToFileURL(path.join(dir, 'probe.mjs')).href)).face
  assert.deepEqual(Object.keys(cjs).sort(), original)
  assert.deepEqual(named(esm), original)
  assert.equal(esm.default, cjs)
  for (const name of original) assert.equal(esm[name], cjs[name], name)
  tsc(path.join(dir, 'tsconfig.json'))
  assert.equal(run('esm.mjs', dir).trim(), 'ok')
  assert.equal(run('cjs.cjs', dir).trim(), 'ok')
})
