'use strict'
// node-redlock's own tests, run against deadbolt's faces under node-redlock's own runners, so
// that the faces cannot drift from it. Only the import and the servers' addresses change
// (node-redlock's suites expect docker hosts or the default port; these run on throwaway
// redis-servers, never the shared one, which the v5 suite would empty).
//
// - node-redlock 4 (`deadbolt/redlock/v4`): test.js of redlock 4.1.0, the last release whose
//   npm tarball ships it (devDependency `redlock41`; 4.2.0's adds a SCRIPT FLUSH and two
//   lockWithOptions tests), under mocha 6 with chai 4 as its devDependencies say, on node_redis
//   3 (`redis3`), node_redis 3 with string_numbers, ioredis, and ioredis over three databases.
//   `--exit`: its clients stay open after the last test, as under its own CI.
// - node-redlock 5 (`deadbolt/redlock`): src/single.test.ts and src/multi.test.ts of
//   5.0.0-beta.2 under ava 4, transpiled as its build does. npm does not ship them: they run
//   when NODE_REDLOCK_SRC names a checkout of node-redlock at v5.0.0-beta.2, and are skipped
//   otherwise.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { pathToFileURL } = require('node:url')
const { freePort } = require('./helpers')
const { startRedisServers, startRedisCluster } = require('./fixtures/redis-server')

const ROOT = path.join(__dirname, '..')
const MODULES = path.join(ROOT, 'node_modules')
const V4_SOURCE = path.join(MODULES, 'redlock41')

/** Replaces `from` by `to` in `text`, checking that it occurs exactly once. */
function once(text, from, to, file) {
  const at = text.indexOf(from)
  assert.ok(at >= 0 && text.lastIndexOf(from) === at, `${file}: ${JSON.stringify(from)} was not found once`)
  return text.slice(0, at) + to + text.slice(at + from.length)
}

/** A temporary directory, removed after the test. */
function tmpdir(t, name) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `deadbolt-${name}-`))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** Runs `args` with node in `cwd`: its exit code and output. */
function run(args, cwd) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, FORCE_COLOR: '0' } })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => { stdout += d })
    child.stderr.on('data', (d) => { stderr += d })
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

const version = (dir) => JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')).version

test('the v4 tests are redlock 4.1.0\'s, run under mocha 6 and chai 4 as its devDependencies say', () => {
  assert.equal(version(V4_SOURCE), '4.1.0')
  const dev = JSON.parse(fs.readFileSync(path.join(V4_SOURCE, 'package.json'), 'utf8')).devDependencies
  assert.equal(dev.mocha, '^6.1.4')
  assert.equal(version(path.join(MODULES, 'mocha6')).split('.')[0], '6')
  assert.equal(dev.chai, '^4.2.0')
  assert.equal(version(path.join(MODULES, 'chai')).split('.')[0], '4')
})

test('node-redlock 4.1.0\'s own tests pass against deadbolt/redlock/v4', async (t) => {
  const servers = await startRedisServers(t, 1)
  if (!servers) return
  t.after(() => servers[0].kill())
  const port = servers[0].port
  const file = 'test.js'
  let text = fs.readFileSync(path.join(V4_SOURCE, file), 'utf8')
  text = once(text, "require('./redlock')", `require(${JSON.stringify(path.join(ROOT, 'redlock', 'v4.js'))})`, file)
  text = once(text, "require('redis').createClient()", `require('redis').createClient(${port})`, file)
  text = once(text, '{string_numbers: true}', `{port: ${port}, string_numbers: true}`, file)
  text = once(text, "new (require('ioredis'))()", `new (require('ioredis'))(${port})`, file)
  for (const db of [1, 2, 3]) text = once(text, `({db: ${db}})`, `({port: ${port}, db: ${db}})`, file)
  const dir = tmpdir(t, 'redlock-v4-spec')
  fs.writeFileSync(path.join(dir, file), text)
  fs.mkdirSync(path.join(dir, 'node_modules'))
  const fromSource = (name) => path.dirname(require.resolve(`${name}/package.json`, { paths: [V4_SOURCE] }))
  const links = { chai: path.join(MODULES, 'chai'), bluebird: fromSource('bluebird'), redis: path.join(MODULES, 'redis3'), ioredis: path.join(MODULES, 'ioredis') }
  for (const [name, from] of Object.entries(links)) fs.symlinkSync(from, path.join(dir, 'node_modules', name), 'dir')
  const mocha = path.join(MODULES, 'mocha6', 'bin', '_mocha')
  const { code, stdout, stderr } = await run([mocha, '--exit', '--reporter', 'json', file], dir)
  let report
  try {
    report = JSON.parse(stdout.slice(stdout.indexOf('{')))
  } catch {
    assert.fail(`mocha exited ${code} without a JSON report:\n${stdout}\n${stderr}`)
  }
  for (const result of [...report.passes, ...report.failures]) {
    await t.test(result.fullTitle, () => {
      if (result.err && Object.keys(result.err).length > 0) assert.fail(result.err.message ?? JSON.stringify(result.err))
    })
  }
  assert.deepEqual(report.failures.map((f) => `${f.fullTitle}: ${f.err.message}`), [])
  assert.deepEqual([report.stats.passes, report.stats.pending], [report.stats.tests, 0])
  assert.ok(report.stats.tests >= 100, `${report.stats.tests} tests`)
  assert.equal(code, 0)
})

/** node-redlock 5's test files, each line to change, and what to change it to. */
function v5Edits(ports) {
  const face = JSON.stringify(pathToFileURL(path.join(ROOT, 'redlock', 'index.mjs')).href)
  const instance = (name, port) => [`new Redis({ host: "${name}" })`, `new Redis({ host: "127.0.0.1", port: ${port} })`]
  const cluster = (name, port) => [`new Cluster([{ host: "${name}" }])`, `new Cluster([{ host: "127.0.0.1", port: ${port} }])`]
  const importLine = ['from "./index.js"', `from ${face}`]
  return {
    'single.test.ts': [
      importLine,
      instance('redis-single-instance', ports.single),
      cluster('redis-single-cluster-1', ports.cluster),
      // "locks fail when redis is unreachable": a port nobody listens on, not the default.
      ['host: "127.0.0.1",\n', `host: "127.0.0.1",\n        port: ${ports.closed},\n`],
    ],
    'multi.test.ts': [
      importLine,
      instance('redis-multi-instance-a', ports.multi[0]),
      instance('redis-multi-instance-b', ports.multi[1]),
      instance('redis-multi-instance-c', ports.multi[2]),
      cluster('redis-multi-cluster-a-1', ports.clusters[0]),
      cluster('redis-multi-cluster-b-1', ports.clusters[1]),
      cluster('redis-multi-cluster-c-1', ports.clusters[2]),
    ],
  }
}

test('node-redlock 5.0.0-beta.2\'s own tests pass against deadbolt/redlock', async (t) => {
  const source = process.env.NODE_REDLOCK_SRC
  if (!source) {
    t.skip('set NODE_REDLOCK_SRC to a checkout of node-redlock at v5.0.0-beta.2 (npm does not ship its tests)')
    return
  }
  assert.equal(version(source).replace(/^v/, ''), '5.0.0-beta.2')
  const servers = await startRedisServers(t, 4)
  if (!servers) return
  const clusters = []
  for (let i = 0; i < 4; i++) clusters.push(await startRedisCluster(t, 3))
  t.after(async () => {
    await Promise.all(servers.map((s) => s.kill()))
    await Promise.all(clusters.map((c) => c.stop()))
  })
  const ports = {
    single: servers[0].port,
    multi: servers.slice(1).map((s) => s.port),
    cluster: clusters[0].nodes[0].port,
    clusters: clusters.slice(1).map((c) => c.nodes[0].port),
    closed: await freePort(),
  }
  const ts = require('typescript')
  const dir = tmpdir(t, 'redlock-v5-spec')
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ type: 'module' }))
  for (const [file, edits] of Object.entries(v5Edits(ports))) {
    let text = fs.readFileSync(path.join(source, 'src', file), 'utf8')
    for (const [from, to] of edits) text = once(text, from, to, file)
    const js = ts.transpileModule(text, { compilerOptions: { module: ts.ModuleKind.ES2020, target: ts.ScriptTarget.ES2020 } }).outputText
    fs.writeFileSync(path.join(dir, file.replace(/\.ts$/, '.js')), js)
  }
  fs.mkdirSync(path.join(dir, 'node_modules'))
  for (const name of ['ava', 'ioredis']) fs.symlinkSync(path.join(MODULES, name), path.join(dir, 'node_modules', name), 'dir')
  const ava = path.join(MODULES, 'ava', 'entrypoints', 'cli.mjs')
  const { code, stdout, stderr } = await run([ava, '--verbose', '--serial', '--tap', 'single.test.js', 'multi.test.js'], dir)
  // TAP: each result line, then (for a failure) ava's diagnostics up to the next result.
  const results = []
  for (const line of stdout.split('\n')) {
    const m = /^(not ok|ok) \d+ - (.*)$/.exec(line)
    if (m) results.push({ ok: m[1] === 'ok', title: m[2], detail: [] })
    else if (results.length > 0 && !results[results.length - 1].ok) results[results.length - 1].detail.push(line)
  }
  for (const r of results) {
    await t.test(r.title, () => assert.ok(r.ok, `${r.title}\n${r.detail.join('\n')}`))
  }
  assert.ok(results.length > 0, `ava printed no results (exit ${code}):\n${stdout}\n${stderr}`)
  assert.deepEqual(results.filter((r) => !r.ok).map((r) => r.title), [])
  assert.equal(code, 0, stderr)
})
