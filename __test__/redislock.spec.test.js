'use strict'
// redislock 1.3.0's own specs, run against deadbolt's redislock face so that the face cannot
// drift from redislock. The spec files come from redislock's npm tarball
// (node_modules/redislock/spec, its repository's spec/), copied to a temporary directory with
// only the line that requires redislock changed to require this face (the worktree's
// redislock/ entry), and run under redislock's own test tools: mocha 2 and expect.js (its
// devDependencies), bluebird (its dependency) and node_redis (`redis`, here redis@3 through
// the redis3 alias).
//
// Two files test redislock's public API: errorsSpec.js (4 tests) and
// integration/lockIntegrationSpec.js (7), 11 in all. The other two, lockSpec.js and
// redislockSpec.js, test its private module (require('../lib/lock') through rewire, on
// fakeredis with a mock Shavaluator), where more than a require line would have to change.
//
// The integration spec uses node_redis's default client (the shared Redis on 127.0.0.1:6379)
// and its own key `integration:test`, deleted after each of its tests; it never flushes.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { needRedis } = require('./helpers')

const ROOT = path.join(__dirname, '..')
const MODULES = path.join(ROOT, 'node_modules')
const REDISLOCK = path.join(MODULES, 'redislock')
const FACE = path.join(ROOT, 'redislock')

/** Each spec run, and the one line of it that requires redislock. */
const SPECS = [
  ['errorsSpec.js', "var errors = require('../lib/errors');"],
  ['integration/lockIntegrationSpec.js', "var redislock = require('../../lib/redislock');"],
]

/** The modules the specs require, as redislock's own tests resolve them. */
function specModules() {
  const fromRedislock = (name) => path.dirname(require.resolve(`${name}/package.json`, { paths: [REDISLOCK] }))
  return {
    'expect.js': path.join(MODULES, 'expect.js'),
    bluebird: fromRedislock('bluebird'),
    redis: path.join(MODULES, 'redis3'),
  }
}

/**
 * A temporary directory holding the specs, each with its require line pointed at the face
 * (checked to be the only line that differs), and node_modules links to what they require.
 */
function prepare(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-redislock-spec-'))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  for (const [file, line] of SPECS) {
    const original = fs.readFileSync(path.join(REDISLOCK, 'spec', file), 'utf8')
    const lines = original.split('\n')
    const at = lines.indexOf(line)
    assert.ok(at >= 0 && lines.lastIndexOf(line) === at, `${file}: the require line was not found once`)
    lines[at] = line.replace(/require\('[^']+'\)/, `require(${JSON.stringify(FACE)})`)
    const target = path.join(dir, 'spec', file)
    fs.mkdirSync(path.dirname(target), { recursive: true })
    fs.writeFileSync(target, lines.join('\n'))
  }
  fs.mkdirSync(path.join(dir, 'node_modules'))
  for (const [name, from] of Object.entries(specModules())) {
    fs.symlinkSync(from, path.join(dir, 'node_modules', name), 'dir')
  }
  return dir
}

/** Runs mocha's `_mocha` on the specs in `dir` with its JSON reporter: the parsed report. */
function mocha(dir) {
  const bin = path.join(MODULES, 'mocha', 'bin', '_mocha')
  const args = [bin, '--reporter', 'json', ...SPECS.map(([file]) => path.join('spec', file))]
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => { stdout += d })
    child.stderr.on('data', (d) => { stderr += d })
    child.on('error', reject)
    child.on('close', (code) => {
      try {
        resolve({ code, report: JSON.parse(stdout.slice(stdout.indexOf('{'))) })
      } catch {
        reject(new Error(`mocha exited ${code} without a JSON report:\n${stdout}\n${stderr}`))
      }
    })
  })
}

test('the specs are redislock 1.3.0\'s, run under mocha 2 and expect.js as its devDependencies say', () => {
  const version = (dir) => JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')).version
  assert.equal(version(REDISLOCK), '1.3.0')
  assert.equal(version(path.join(MODULES, 'mocha')).split('.')[0], '2')
  const dev = JSON.parse(fs.readFileSync(path.join(REDISLOCK, 'package.json'), 'utf8')).devDependencies
  assert.equal(dev.mocha, '2')
  assert.ok('expect.js' in dev && 'redis' in dev)
  assert.ok(fs.existsSync(path.join(MODULES, 'expect.js', 'package.json')))
})

test('redislock 1.3.0\'s own specs pass against the face, 11 of 11', async (t) => {
  if (!(await needRedis(t))) return
  const { code, report } = await mocha(prepare(t))
  for (const result of [...report.passes, ...report.failures]) {
    await t.test(result.fullTitle, () => {
      if (result.err && Object.keys(result.err).length > 0) assert.fail(result.err.message ?? JSON.stringify(result.err))
    })
  }
  const failed = report.failures.map((f) => `${f.fullTitle}: ${f.err.message}`)
  assert.deepEqual(failed, [])
  assert.deepEqual([report.stats.tests, report.stats.passes, report.stats.pending], [11, 11, 0])
  assert.equal(code, 0)
})
