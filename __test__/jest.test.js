'use strict'
// deadbolt inside jest's node environment, which evaluates the package in a sandbox: jest 26's
// has no performance, AbortController, AbortSignal, EventTarget or structuredClone, its
// resolver ignores `exports` and cannot resolve node: specifiers. jest is not a
// devDependency; point DEADBOLT_JEST_DIRS at installs of it (directories holding
// node_modules/jest, separated by the path delimiter), e.g.
//   npm install --prefix /tmp/jest26 --no-save --ignore-scripts jest@26
//   DEADBOLT_JEST_DIRS=/tmp/jest26:/tmp/jest30 node --test __test__/jest.test.js
// Each directory found is one test; without any, the test is skipped with a message.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const ROOT = path.join(__dirname, '..')

function jestInstalls() {
  const dirs = (process.env.DEADBOLT_JEST_DIRS ?? '').split(path.delimiter).filter(Boolean)
  const found = []
  for (const dir of dirs) {
    try {
      const manifest = require.resolve('jest/package.json', { paths: [dir] })
      found.push({ bin: path.join(path.dirname(manifest), 'bin', 'jest.js'), version: require(manifest).version })
    } catch {
      // Reported by the skip below when nothing is found.
    }
  }
  return found
}

const SPEC = `
const { connect } = require('deadbolt')
const redislock = require('deadbolt/redislock')
const sqlLock = require('deadbolt/sql-lock')

test('deadbolt acquires and releases on memory:// inside jest', async () => {
  const locks = await connect('memory://jest')
  const lock = await locks.acquire('k', { ttl: 5000 })
  expect(lock.held).toBe(true)
  expect(lock.signal.aborted).toBe(false)
  expect(await lock.release()).toBe(true)
  expect(await locks.inspect('k')).toBe(null)
  await locks.close()
  expect(Object.keys(redislock).sort()).toEqual(['LockAcquisitionError', 'LockExtendError', 'LockReleaseError', 'createLock', 'getAcquiredLocks', 'setDefaults'])
  expect(typeof sqlLock.getLock).toBe('function')
})
`

const installs = jestInstalls()

if (installs.length === 0) {
  test('deadbolt loads and locks in a jest node environment', { skip: 'jest is not installed: set DEADBOLT_JEST_DIRS (see the head of __test__/jest.test.js)' }, () => {})
}

for (const { bin, version } of installs) {
  test(`deadbolt loads and locks in jest ${version}'s node environment`, (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-jest-'))
    t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
    fs.mkdirSync(path.join(dir, 'node_modules'))
    fs.symlinkSync(ROOT, path.join(dir, 'node_modules', 'deadbolt'), 'dir')
    fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ private: true }))
    fs.writeFileSync(path.join(dir, 'deadbolt.test.js'), SPEC)
    try {
      execFileSync(process.execPath, [bin, '--rootDir', dir, '--testEnvironment', 'node', '--ci', '--no-cache', '--runInBand'], { cwd: dir, encoding: 'utf8', stdio: 'pipe' })
    } catch (err) {
      assert.fail(`jest ${version}:\n${err.stdout ?? ''}${err.stderr ?? ''}`)
    }
  })
}
