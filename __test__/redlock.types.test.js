'use strict'
// The node-redlock faces' entry points from an application: `deadbolt/redlock` and
// `deadbolt/redlock/v4` by require and by import, and their typings under strict TypeScript
// (module nodenext, as ESM and as CommonJS), wrong calls refused.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const ROOT = path.join(__dirname, '..')

/** An application directory with deadbolt (this worktree) installed, and `files` in it. */
function app(t, files) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-redlock-app-'))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.mkdirSync(path.join(dir, 'node_modules'))
  fs.symlinkSync(ROOT, path.join(dir, 'node_modules', 'deadbolt'), 'dir')
  fs.symlinkSync(path.join(ROOT, 'node_modules', '@types'), path.join(dir, 'node_modules', '@types'), 'dir')
  for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), text)
  return dir
}

function node(args, cwd) {
  try {
    return execFileSync(process.execPath, args, { cwd, encoding: 'utf8' })
  } catch (err) {
    assert.fail(`${err.stdout ?? ''}${err.stderr ?? ''}`)
  }
}

test('deadbolt/redlock exports node-redlock 5\'s names by require and by import, Redlock as the default', (t) => {
  const dir = app(t, {
    'probe.mjs': `
      import assert from 'node:assert/strict'
      import { createRequire } from 'node:module'
      import Redlock, { Lock, ExecutionError, ResourceLockedError } from 'deadbolt/redlock'
      import RedlockV4, { Lock as LockV4, LockError } from 'deadbolt/redlock/v4'
      const require = createRequire(import.meta.url)
      const cjs = require('deadbolt/redlock')
      assert.equal(cjs.default, Redlock)
      assert.deepEqual([cjs.Lock, cjs.ExecutionError, cjs.ResourceLockedError], [Lock, ExecutionError, ResourceLockedError])
      const v4 = require('deadbolt/redlock/v4')
      assert.equal(v4, RedlockV4)
      assert.deepEqual([v4.Lock, v4.LockError], [LockV4, LockError])
      console.log('ok')
    `,
  })
  assert.equal(node(['probe.mjs'], dir).trim(), 'ok')
})

test('the faces\' typings compile under strict TypeScript as ESM and as CommonJS, and refuse wrong calls', (t) => {
  const dir = app(t, {
    'package.json': JSON.stringify({ private: true }),
    'tsconfig.json': JSON.stringify({
      compilerOptions: { target: 'ES2022', module: 'nodenext', moduleResolution: 'nodenext', lib: ['ES2022'], types: ['node'], strict: true, noEmit: true, skipLibCheck: false },
      files: ['esm.mts', 'cjs.cts'],
    }),
    'esm.mts': `
      import Redlock, { ExecutionError, ResourceLockedError, type Lock, type ExecutionStats, type RedlockAbortSignal } from 'deadbolt/redlock'
      import RedlockV4 from 'deadbolt/redlock/v4'
      export async function v5(client: object): Promise<number> {
        const redlock = new Redlock([client, 'redis://127.0.0.1:6379'], { retryCount: -1 })
        redlock.on('error', (err: Error) => void err)
        const lock: Lock = await redlock.acquire(['a', 'b'], 5000, { retryDelay: 10 })
        const stats: ExecutionStats = await lock.attempts[0]!
        const next: Lock = await lock.extend(5000)
        await redlock.using(['a'], 5000, async (signal: RedlockAbortSignal) => signal.error?.message)
        const n: number = await redlock.using(['a'], 5000, { automaticExtensionThreshold: 100 }, async () => 1)
        await next.release()
        const e = new ExecutionError('x', [])
        const code: 'ERR_LOCK_ACQUISITION' | 'ERR_LOCK_EXTEND' | 'ERR_LOCK_RELEASE' = e.code
        void [code, new ResourceLockedError('y').code, stats.votesAgainst.size]
        // @ts-expect-error resources are an array
        await redlock.acquire('a', 5000)
        // @ts-expect-error unknown setting
        await redlock.acquire(['a'], 5000, { retries: 3 })
        await redlock.quit()
        return n
      }
      export function v4(client: object): void {
        const redlock = new RedlockV4([client], { retryCount: 2, lockScript: (s) => s })
        redlock.lock('a', 1000, (err, lock) => { void err; void lock?.unlock() })
        void redlock.lock(['a', 'b'], 1000).nodeify((err, lock) => { void err; void lock?.extend(1000) })
        const attempts: number | undefined = new RedlockV4.LockError('x').attempts
        void attempts
        // @ts-expect-error ttl is a number
        void redlock.lock('a', '1000')
      }
    `,
    'cjs.cts': `
      import Redlock = require('deadbolt/redlock')
      import RedlockV4 = require('deadbolt/redlock/v4')
      export const faces: [typeof Redlock.default, typeof RedlockV4] = [Redlock.default, RedlockV4]
      const lock: RedlockV4.Lock | null = null
      void lock
    `,
  })
  node([require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.json'], dir)
})
