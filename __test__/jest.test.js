'use strict'
// deadbolt inside jest, which evaluates the package in a sandbox: jest 26's node environment
// has no performance, AbortController, AbortSignal, EventTarget or structuredClone, its
// resolver ignores `exports` and cannot resolve node: specifiers; its jsdom environment is a
// browser-like global on top. One small spec runs under jest 26 (node and jsdom environments)
// and under the latest jest (node).
//
// jest is not a devDependency of deadbolt (every `npm ci` and git install would pay for two
// jest trees). Each version has its own package.json and lockfile under __test__/jest/<name>/;
// this test installs it once (`npm ci`, from npm's cache when it can) into
// node_modules/.cache/deadbolt-jest/<name>-<lockfile hash>/ and reuses it until the lockfile
// changes. To move "latest" forward: change the version in __test__/jest/latest/package.json
// and run `npm install --package-lock-only` there.

const { test, before } = require('node:test')
const assert = require('node:assert/strict')
const { spawn, execFile } = require('node:child_process')
const { createHash } = require('node:crypto')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { shellEnv } = require('./helpers')

const ROOT = path.join(__dirname, '..')
const CACHE = path.join(ROOT, 'node_modules', '.cache', 'deadbolt-jest')

/** Resolves with { code, output } of `cmd args` run in `cwd`. */
function run(cmd, args, cwd) {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd, env: shellEnv(), stdio: ['ignore', 'pipe', 'pipe'] })
    let output = ''
    child.stdout.on('data', (d) => { output += d })
    child.stderr.on('data', (d) => { output += d })
    child.on('error', (err) => resolve({ code: -1, output: `${output}${err.message}` }))
    child.on('close', (code) => resolve({ code, output }))
  })
}

/**
 * The jest installed from __test__/jest/<name>/, installing it first if needed: its bin and
 * version, or { error } with npm's output.
 */
async function jestInstall(name) {
  const spec = path.join(__dirname, 'jest', name)
  const lock = fs.readFileSync(path.join(spec, 'package-lock.json'))
  const dir = path.join(CACHE, `${name}-${createHash('sha256').update(lock).digest('hex').slice(0, 12)}`)
  if (!fs.existsSync(path.join(dir, 'node_modules', 'jest', 'package.json'))) {
    // Installed aside and renamed into place, so a half-done install is never used.
    const tmp = `${dir}.tmp-${process.pid}`
    fs.rmSync(tmp, { recursive: true, force: true })
    fs.mkdirSync(tmp, { recursive: true })
    for (const f of ['package.json', 'package-lock.json']) fs.copyFileSync(path.join(spec, f), path.join(tmp, f))
    const r = await run('npm', ['ci', '--ignore-scripts', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error'], tmp)
    if (r.code !== 0) {
      fs.rmSync(tmp, { recursive: true, force: true })
      return { error: `npm ci of __test__/jest/${name} failed:\n${r.output}` }
    }
    try {
      fs.renameSync(tmp, dir)
    } catch {
      // Another run installed it meanwhile: use that one.
      fs.rmSync(tmp, { recursive: true, force: true })
    }
  }
  const manifest = path.join(dir, 'node_modules', 'jest', 'package.json')
  return { bin: path.join(path.dirname(manifest), 'bin', 'jest.js'), version: require(manifest).version }
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

// The same spec in each environment; the docblock picks jsdom for one file.
const ENVIRONMENTS = {
  node: SPEC,
  jsdom: `/**\n * @jest-environment jsdom\n */\nexpect(typeof window).toBe('object')\n${SPEC}`,
}

const RUNS = [
  { name: '26', environments: ['node', 'jsdom'] },
  { name: 'latest', environments: ['node'] },
]

const installs = {}
before(async () => {
  // Both installs at once: on a fresh machine they are mostly network waits.
  await Promise.all(RUNS.map(async ({ name }) => { installs[name] = await jestInstall(name) }))
})

/** Runs jest `bin` on one spec per environment in a throwaway project; jest's JSON report. */
function runJest(t, bin, environments) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-jest-'))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.mkdirSync(path.join(dir, 'node_modules'))
  fs.symlinkSync(ROOT, path.join(dir, 'node_modules', 'deadbolt'), 'dir')
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ private: true }))
  for (const env of environments) fs.writeFileSync(path.join(dir, `${env}.test.js`), ENVIRONMENTS[env])
  const report = path.join(dir, 'report.json')
  const args = [bin, '--rootDir', dir, '--ci', '--no-cache', '--runInBand', '--json', '--outputFile', report]
  return new Promise((resolve) => {
    execFile(process.execPath, args, { cwd: dir, env: shellEnv(), encoding: 'utf8' }, (err, stdout, stderr) => {
      const results = fs.existsSync(report) ? JSON.parse(fs.readFileSync(report, 'utf8')).testResults : []
      resolve({ failed: err !== null, output: `${stdout}${stderr}`, results })
    })
  })
}

for (const { name, environments } of RUNS) {
  test(`deadbolt loads and locks in jest ${name} (${environments.join(' and ')} environment${environments.length > 1 ? 's' : ''})`, async (t) => {
    const install = installs[name]
    if (install.error) {
      if (process.env.CI) assert.fail(install.error)
      return t.skip(`jest could not be installed (is the npm registry reachable?): ${install.error.split('\n')[0]}`)
    }
    t.diagnostic(`jest ${install.version}`)
    const { failed, output, results } = await runJest(t, install.bin, environments)
    assert.equal(failed, false, `jest ${install.version}:\n${output}`)
    const passed = results.filter((r) => r.status === 'passed').map((r) => path.basename(r.name)).sort()
    assert.deepEqual(passed, environments.map((e) => `${e}.test.js`).sort(), output)
  })
}
