'use strict'
// deadbolt as an app gets it from npm. The release is staged as scripts/artifacts.js stages it
// (in a copy: it edits package.json), `npm pack` makes the main package and this platform's
// package, both tarballs are installed into a fresh app in the temporary directory (no link to
// this checkout), and CommonJS, ES module and TypeScript programs run there against Redis, as
// do the README's samples. Also: that the packed manifest carries no lifecycle script, what
// `prepare` does in a clone on a machine that can neither download nor build a binary, and
// what `require('deadbolt')` says when none fits.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { needRedis, prefix, REDIS_URL, shellEnv } = require('./helpers')
const { currentPlatform, RUST_VERSION } = require('../lib/platform')

const ROOT = path.join(__dirname, '..')
const pkg = require('../package.json')
const PLATFORM = currentPlatform()
const PLATFORM_PACKAGE = `${pkg.name}-${PLATFORM}`
const BINARY = `${pkg.napi.binaryName}.${PLATFORM}.node`

/** Runs `cmd args` in `cwd`; fails the test with its output unless it exits 0. */
function sh(cmd, args, cwd, env = shellEnv()) {
  const started = process.hrtime.bigint()
  const r = spawnSync(cmd, args, { cwd, env, encoding: 'utf8', maxBuffer: 64 << 20 })
  const ms = Number(process.hrtime.bigint() - started) / 1e6
  const output = `${r.stdout ?? ''}${r.stderr ?? ''}`
  if (r.status !== 0) assert.fail(`${cmd} ${args.join(' ')} (in ${cwd}) exited ${r.status ?? r.signal ?? r.error?.message}:\n${output}`)
  return { output, stdout: r.stdout, stderr: r.stderr, ms }
}

/** The file names in a tarball (without npm's `package/` prefix). */
function listTarball(file) {
  return sh('tar', ['tzf', file], os.tmpdir()).output.split('\n').filter(Boolean).map((f) => f.replace(/^package\//, ''))
}

const fixture = {}

before(() => {
  if (!fs.existsSync(path.join(ROOT, BINARY))) {
    throw new Error(`${BINARY} is not built: run \`npm run build:debug\` (or \`npm install\`) first`)
  }
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-package-'))
  fixture.tmp = tmp
  // A release checkout: what npm packs, the release script, and the built binary.
  const stage = path.join(tmp, 'stage')
  fs.mkdirSync(path.join(stage, 'scripts'), { recursive: true })
  const copy = (rel) => fs.cpSync(path.join(ROOT, rel), path.join(stage, rel), { recursive: true, filter: (src) => !src.endsWith('.node') })
  for (const rel of ['package.json', 'README.md', 'LICENSE', 'npm', 'scripts/artifacts.js']) copy(rel)
  for (const rel of pkg.files.filter((f) => !f.includes('*'))) copy(rel)
  fs.copyFileSync(path.join(ROOT, BINARY), path.join(stage, BINARY))
  fixture.artifacts = sh(process.execPath, ['scripts/artifacts.js'], stage).output

  const tarballs = path.join(tmp, 'tarballs')
  fs.mkdirSync(tarballs)
  fixture.pack = sh('npm', ['pack', '--json', '--pack-destination', tarballs], stage)
  sh('npm', ['pack', '--pack-destination', tarballs], path.join(stage, 'npm', PLATFORM))
  fixture.main = path.join(tarballs, `${pkg.name}-${pkg.version}.tgz`)
  fixture.platform = path.join(tarballs, `${PLATFORM_PACKAGE}-${pkg.version}.tgz`)

  // The app: both tarballs installed from the cache only; the other platforms' optional
  // packages are not there, which must not fail the install.
  const app = path.join(tmp, 'app')
  fs.mkdirSync(app)
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', private: true }))
  // The package's runtime dependencies at their locked versions, in npm's cache first: `npm
  // ci` leaves tarballs there but not the registry documents an install resolves names by,
  // so on a fresh machine the offline install below could not find them.
  const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8'))
  for (const name of Object.keys(pkg.dependencies ?? {})) {
    sh('npm', ['cache', 'add', `${name}@${lock.packages[`node_modules/${name}`].version}`], app)
  }
  fixture.install = sh('npm', ['install', '--offline', '--no-audit', '--no-fund', fixture.main, fixture.platform], app)
  // Node's typings for the TypeScript program, as an app would have them (copied, not linked).
  for (const types of ['@types/node', 'undici-types']) {
    fs.cpSync(path.join(ROOT, 'node_modules', types), path.join(app, 'node_modules', types), { recursive: true, dereference: true })
  }
  fixture.app = app
})

after(() => {
  if (fixture.tmp) fs.rmSync(fixture.tmp, { recursive: true, force: true })
})

test('npm pack ships the JavaScript, the typings, README and LICENSE, and no Rust sources, build output or binary', () => {
  const files = listTarball(fixture.main)
  for (const f of ['package.json', 'LICENSE', 'README.md', 'index.js', 'index.mjs', 'index.d.ts', 'index.d.mts', 'binding.js', 'binding.d.ts', 'lib/addon.js', 'redislock/index.js', 'redlock/index.js', 'redlock/v4.d.mts', 'sql-lock/index.mjs']) {
    assert.ok(files.includes(f), `${f} is not in the tarball`)
  }
  const unwanted = files.filter((f) => /^(src|target|npm|__test__|bench|torture|scripts)\/|\.rs$|^Cargo\.|\.node$/.test(f))
  assert.deepEqual(unwanted, [])
})

test('the packed package depends optionally on every platform package, at its own version', () => {
  const manifest = JSON.parse(sh('tar', ['xzfO', fixture.main, 'package/package.json'], os.tmpdir()).output)
  const platforms = fs.readdirSync(path.join(ROOT, 'npm')).sort()
  assert.deepEqual(manifest.optionalDependencies, Object.fromEntries(platforms.map((p) => [`${pkg.name}-${p}`, pkg.version])))
  assert.equal(manifest.optionalDependencies[PLATFORM_PACKAGE], pkg.version)
  // The loader (binding.js, generated) asks for exactly these package names.
  const loader = fs.readFileSync(path.join(ROOT, 'binding.js'), 'utf8')
  for (const name of Object.keys(manifest.optionalDependencies)) assert.ok(loader.includes(`require('${name}')`), `binding.js never requires ${name}`)
})

test('the platform package carries the binary and its package.json', () => {
  assert.deepEqual(listTarball(fixture.platform).filter((f) => f !== 'README.md').sort(), [BINARY, 'package.json'])
})

test('npm pack of a release checkout builds nothing', (t) => {
  t.diagnostic(`npm pack of the main package took ${Math.round(fixture.pack.ms)} ms`)
  assert.doesNotMatch(fixture.pack.output, /Compiling|Finished|napi build/)
  assert.equal(JSON.parse(fixture.pack.stdout)[0].name, pkg.name)
})

test('an app installed from the two tarballs loads the binary from the platform package', () => {
  fs.writeFileSync(path.join(fixture.app, 'which.cjs'), "require('deadbolt'); console.log(Object.keys(require.cache).filter((f) => f.endsWith('.node')).join('\\n'))")
  const out = sh(process.execPath, ['which.cjs'], fixture.app).output
  assert.equal(out.trim(), path.join(fs.realpathSync(fixture.app), 'node_modules', PLATFORM_PACKAGE, BINARY))
})

test('a binary next to the package (a source build) wins over the platform package', () => {
  const dev = path.join(fixture.tmp, 'dev-app')
  for (const name of ['deadbolt', PLATFORM_PACKAGE]) {
    fs.cpSync(path.join(fixture.app, 'node_modules', name), path.join(dev, 'node_modules', name), { recursive: true })
  }
  fs.copyFileSync(path.join(ROOT, BINARY), path.join(dev, 'node_modules', 'deadbolt', BINARY))
  fs.copyFileSync(path.join(fixture.app, 'which.cjs'), path.join(dev, 'which.cjs'))
  const out = sh(process.execPath, ['which.cjs'], dev).output
  assert.equal(out.trim(), path.join(fs.realpathSync(dev), 'node_modules', 'deadbolt', BINARY))
})

const names = {
  redislock: ['LockAcquisitionError', 'LockExtendError', 'LockReleaseError', 'createLock', 'getAcquiredLocks', 'setDefaults'],
  sqlLock: ['DLMError', 'DLMErrorTypes', 'close', 'getLock', 'initialize', 'transaction'],
}

test('a CommonJS program in the app takes and releases a lock on Redis, with the redislock and sql-lock subpaths', async (t) => {
  if (!(await needRedis(t))) return
  fs.writeFileSync(path.join(fixture.app, 'program.cjs'), `
    const assert = require('assert')
    const { connect, Lock, LockAcquisitionError } = require('deadbolt')
    const redislock = require('deadbolt/redislock')
    const sqlLock = require('deadbolt/sql-lock')
    const [url, key] = process.argv.slice(2)
    assert.deepEqual(Object.keys(redislock).sort(), ${JSON.stringify(names.redislock)})
    assert.deepEqual(Object.keys(sqlLock).sort(), ${JSON.stringify(names.sqlLock)})
    assert.equal(redislock.LockAcquisitionError, LockAcquisitionError)
    ;(async () => {
      const locks = await connect(url)
      const lock = await locks.acquire(key + 'modern', { ttl: 5000 })
      assert.ok(lock instanceof Lock)
      assert.equal(lock.held, true)
      assert.equal(typeof lock.fencingToken, 'bigint')
      assert.equal(await lock.release(), true)
      await locks.close()
      const old = redislock.createLock(url, { timeout: 5000 })
      await old.acquire(key + 'redislock')
      await old.release()
      console.log('ok')
    })().catch((err) => { console.error(err); process.exit(1) })
  `)
  assert.equal(sh(process.execPath, ['program.cjs', REDIS_URL, prefix('pkg-cjs')], fixture.app).output.trim(), 'ok')
})

test('an ES module program in the app imports every name, takes and releases a lock on Redis', async (t) => {
  if (!(await needRedis(t))) return
  fs.writeFileSync(path.join(fixture.app, 'program.mjs'), `
    import assert from 'assert'
    import deadbolt, { connect, createLock, initialize, DLMError, LockLostError } from 'deadbolt'
    import redislock, { createLock as subpathCreateLock } from 'deadbolt/redislock'
    import sqlLock, { getLock } from 'deadbolt/sql-lock'
    const [url, key] = process.argv.slice(2)
    assert.equal(deadbolt.connect, connect)
    assert.equal(subpathCreateLock, createLock)
    assert.deepEqual(Object.keys(redislock).sort(), ${JSON.stringify(names.redislock)})
    assert.deepEqual(Object.keys(sqlLock).sort(), ${JSON.stringify(names.sqlLock)})
    assert.equal(sqlLock.initialize, initialize)
    assert.equal(typeof getLock, 'function')
    assert.ok(new DLMError({ err_type: 'invalid_parameters', err_message: 'x' }) instanceof Error)
    assert.equal(typeof LockLostError, 'function')
    const locks = await connect(url)
    const token = await locks.withLock(key + 'modern', async (lock) => lock.fencingToken)
    assert.equal(typeof token, 'bigint')
    assert.equal(await locks.inspect(key + 'modern'), null)
    await locks.close()
    console.log('ok')
  `)
  assert.equal(sh(process.execPath, ['program.mjs', REDIS_URL, prefix('pkg-esm')], fixture.app).output.trim(), 'ok')
})

test('a strict TypeScript program (module nodenext) in the app compiles with tsc and runs against Redis', async (t) => {
  if (!(await needRedis(t))) return
  const dir = path.join(fixture.app, 'ts')
  fs.mkdirSync(dir, { recursive: true })
  fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
    compilerOptions: { target: 'ES2022', module: 'nodenext', moduleResolution: 'nodenext', lib: ['ES2022', 'ESNext.Disposable'], types: ['node'], strict: true, noEmitOnError: true, skipLibCheck: false, outDir: 'out' },
    files: ['program.mts', 'program.cts'],
  }))
  fs.writeFileSync(path.join(dir, 'program.mts'), `
    import assert from 'node:assert/strict'
    import { connect, type Lock, type LockInfo, LockBackendError } from 'deadbolt'
    import redislock, { type RedisLock } from 'deadbolt/redislock'
    import { initialize, getLock, type LockReleaser } from 'deadbolt/sql-lock'
    const [url, key] = process.argv.slice(2) as [string, string]
    const release: (k: string) => Promise<LockReleaser> = getLock
    void release
    void initialize
    const locks = await connect(url, { connectTimeout: 2_000 })
    const lock: Lock = await locks.acquire(key + 'modern', { ttl: 5_000 })
    const token: bigint = lock.fencingToken
    const info: LockInfo | null = await locks.inspect(key + 'modern')
    assert.equal(info?.fencingToken, token)
    assert.equal(await lock.release(), true)
    await locks.close()
    const old: RedisLock = redislock.createLock(url, { timeout: 5_000 })
    await old.acquire(key + 'redislock')
    await old.release()
    assert.equal(typeof LockBackendError, 'function')
    console.log('ok')
  `)
  fs.writeFileSync(path.join(dir, 'program.cts'), `
    import deadbolt = require('deadbolt')
    import sqlLock = require('deadbolt/sql-lock')
    const names: string[] = Object.keys(sqlLock)
    export const shapes = { connect: typeof deadbolt.connect, names }
  `)
  // The repository's own TypeScript, by absolute path: the app has no TypeScript installed.
  sh(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.json'], dir)
  assert.equal(sh(process.execPath, ['out/program.mjs', REDIS_URL, prefix('pkg-ts')], dir).output.trim(), 'ok')
  assert.equal(sh(process.execPath, ['-e', "console.log(require('./out/program.cjs').shapes.connect)"], dir).output.trim(), 'function')
})

/** The samples of the README and the install guide that name their file in a first comment line (`// app.mjs`). */
function readmeSamples() {
  const readme = ['README.md', 'docs/install.md'].map((f) => fs.readFileSync(path.join(ROOT, f), 'utf8')).join('\n')
  const samples = []
  for (const m of readme.matchAll(/```(\w+)\n\/\/ ([\w.-]+\.(?:cjs|mjs|mts|json))\b[^\n]*\n([\s\S]*?)```/g)) {
    samples.push({ file: m[2], text: m[3] })
  }
  return samples
}

test("the README's samples run as written in the app", async (t) => {
  if (!(await needRedis(t))) return
  const samples = readmeSamples()
  const files = samples.map((s) => s.file)
  // The README's first sample, and the install section's CommonJS, ESM and TypeScript ones.
  assert.deepEqual(files.slice(0, 1), ['example.mjs'])
  for (const f of ['app.cjs', 'app.mjs', 'main.mts', 'tsconfig.json']) assert.ok(files.includes(f), `docs/install.md has no sample named ${f}`)
  const dir = path.join(fixture.app, 'readme')
  fs.mkdirSync(dir, { recursive: true })
  for (const { file, text } of samples) fs.writeFileSync(path.join(dir, file), text)
  for (const file of files.filter((f) => /\.(cjs|mjs)$/.test(f))) sh(process.execPath, [file], dir)
  sh(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.json'], dir)
  sh(process.execPath, ['main.mjs'], dir)
})

test('without the platform package, require fails with ERR_LOCK_NO_BINARY: the platform, the package and how to build, not npm advice', () => {
  // An app whose install skipped the optional dependency (--omit=optional).
  const bare = path.join(fixture.tmp, 'bare-app')
  fs.mkdirSync(path.join(bare, 'node_modules'), { recursive: true })
  fs.cpSync(path.join(fixture.app, 'node_modules', 'deadbolt'), path.join(bare, 'node_modules', 'deadbolt'), { recursive: true })
  fs.writeFileSync(path.join(bare, 'probe.cjs'), `
    try { require('deadbolt'); console.log('loaded') } catch (err) {
      console.log(JSON.stringify({ code: err.code, message: err.message, causeCode: err.cause && err.cause.code }))
    }
  `)
  const out = sh(process.execPath, ['probe.cjs'], bare).output.trim()
  assert.notEqual(out, 'loaded')
  const err = JSON.parse(out)
  assert.equal(err.code, 'ERR_LOCK_NO_BINARY')
  assert.equal(err.causeCode, 'MODULE_NOT_FOUND')
  assert.ok(err.message.includes(PLATFORM), err.message)
  assert.ok(err.message.includes(`npm install ${PLATFORM_PACKAGE}@${pkg.version}`), err.message)
  assert.ok(err.message.includes(`Rust ${RUST_VERSION}`), err.message)
  assert.ok(err.message.includes('C compiler'), err.message)
  assert.doesNotMatch(err.message, /npm has a bug|package-lock\.json/)
})

/** A clone-like directory with prepare.js, the platform module and package.json. */
function prepareDir(name, { sources = true } = {}) {
  const dir = path.join(fixture.tmp, name)
  fs.mkdirSync(path.join(dir, 'scripts'), { recursive: true })
  fs.mkdirSync(path.join(dir, 'lib'), { recursive: true })
  fs.copyFileSync(path.join(ROOT, 'scripts', 'prepare.js'), path.join(dir, 'scripts', 'prepare.js'))
  fs.copyFileSync(path.join(ROOT, 'lib', 'platform.js'), path.join(dir, 'lib', 'platform.js'))
  fs.copyFileSync(path.join(ROOT, 'package.json'), path.join(dir, 'package.json'))
  if (sources) {
    fs.writeFileSync(path.join(dir, 'Cargo.toml'), '')
    fs.mkdirSync(path.join(dir, 'src'))
  }
  return dir
}

test('prepare on a machine without a prebuilt binary or Rust fails with the platform, what to install and how to build', () => {
  const dir = prepareDir('no-rust')
  // No PATH: no rustc, no cargo.
  const r = spawnSync(process.execPath, ['scripts/prepare.js'], { cwd: dir, env: shellEnv({ PATH: '', npm_command: 'install' }), encoding: 'utf8' })
  assert.equal(r.status, 1, r.stdout + r.stderr)
  assert.ok(r.stderr.includes(`no native binary for ${PLATFORM}`), r.stderr)
  assert.ok(r.stderr.includes(`Rust ${RUST_VERSION} or later`), r.stderr)
  assert.ok(r.stderr.includes('C compiler'), r.stderr)
  assert.ok(r.stderr.includes('npm install'), r.stderr)
  assert.doesNotMatch(r.stderr, /npm has a bug/)
})

test('prepare uses an installed prebuilt binary rather than building from source', () => {
  const dir = prepareDir('prebuilt')
  fs.cpSync(path.join(fixture.app, 'node_modules', PLATFORM_PACKAGE), path.join(dir, 'node_modules', PLATFORM_PACKAGE), { recursive: true })
  // rustc is on PATH here: a build would be attempted (and fail: no napi CLI, no sources).
  const r = spawnSync(process.execPath, ['scripts/prepare.js'], { cwd: dir, env: shellEnv({ npm_command: 'install' }), encoding: 'utf8' })
  assert.equal(r.status, 0, r.stdout + r.stderr)
  assert.match(r.stderr, new RegExp(`using the prebuilt binary of ${PLATFORM_PACKAGE}`))
})

test("lib/platform.js's minimum Rust version is Cargo.toml's rust-version", () => {
  const cargo = fs.readFileSync(path.join(ROOT, 'Cargo.toml'), 'utf8')
  assert.equal(/^rust-version\s*=\s*"([^"]+)"/m.exec(cargo)?.[1], RUST_VERSION)
})

test("every package in the lockfiles (dev dependencies, the jest installs) accepts this Node.js: npm ci warns no EBADENGINE", () => {
  const semver = require('semver')
  const offenders = []
  for (const lockfile of ['package-lock.json', '__test__/jest/26/package-lock.json', '__test__/jest/latest/package-lock.json']) {
    const { packages } = JSON.parse(fs.readFileSync(path.join(ROOT, lockfile), 'utf8'))
    for (const [where, entry] of Object.entries(packages)) {
      const range = entry.engines?.node
      if (where !== '' && range && !semver.satisfies(process.version, range)) offenders.push(`${lockfile}: ${where} wants node ${range}`)
    }
  }
  assert.deepEqual(offenders, [])
})

test('the packed manifest carries no script, so npm has no lifecycle script to warn about', () => {
  const manifest = JSON.parse(sh('tar', ['xzfO', fixture.main, 'package/package.json'], os.tmpdir()).output)
  assert.equal(manifest.scripts, undefined)
  // The app's install ran none either, and npm had nothing to ask the app to allow.
  assert.doesNotMatch(fixture.install.output, /deadbolt:|allowScripts|lifecycle|install script/i)
})

test('the packed manifest names the repository, the homepage and where to report bugs', () => {
  const manifest = JSON.parse(sh('tar', ['xzfO', fixture.main, 'package/package.json'], os.tmpdir()).output)
  assert.match(manifest.repository?.url ?? '', /^git\+https:\/\/\S+\.git$/)
  const base = manifest.repository.url.replace(/^git\+/, '').replace(/\.git$/, '')
  assert.equal(manifest.homepage, `${base}#readme`)
  assert.equal(manifest.bugs?.url, `${base}/issues`)
})

test("every link of the packed README works on the registry's page: absolute, or an anchor of the README", () => {
  const readme = sh('tar', ['xzfO', fixture.main, 'package/README.md'], os.tmpdir()).output
  const base = pkg.repository.url.replace(/^git\+/, '').replace(/\.git$/, '')
  const anchors = new Set([...readme.matchAll(/^#+ (.+)$/gm)].map((m) => m[1].toLowerCase().replace(/[^\w\- ]/g, '').replace(/ /g, '-')))
  const links = [...readme.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1])
  assert.ok(links.length > 10)
  for (const link of links) {
    if (link.startsWith('#')) assert.ok(anchors.has(link.slice(1)), `${link}: no such heading`)
    else assert.match(link, /^https:\/\//, `${link} is relative: the registry's page cannot follow it`)
    // A link into this repository names a file that exists in it.
    if (link.startsWith(`${base}/blob/main/`)) {
      const file = link.slice(`${base}/blob/main/`.length).split('#')[0]
      assert.ok(fs.existsSync(path.join(ROOT, file)), `${link}: ${file} is not in the repository`)
    }
  }
})

test('the typings of the three entry points compile on the oldest supported TypeScript (4.9) with @types/node 20, strict', () => {
  // A second app: TypeScript 4.9 cannot read the @types/node of the first (26 needs 5.6).
  const dir = path.join(fixture.tmp, 'ts-min')
  fs.mkdirSync(path.join(dir, 'node_modules', '@types'), { recursive: true })
  fs.symlinkSync(fs.realpathSync(path.join(fixture.app, 'node_modules', 'deadbolt')), path.join(dir, 'node_modules', 'deadbolt'))
  fs.cpSync(path.join(ROOT, 'node_modules', 'types-node-min'), path.join(dir, 'node_modules', '@types', 'node'), { recursive: true, dereference: true })
  const typesNode = require(path.join(dir, 'node_modules', '@types', 'node', 'package.json'))
  const tsc = path.join(ROOT, 'node_modules', 'typescript-min', 'bin', 'tsc')
  assert.equal(require(path.join(ROOT, 'node_modules', 'typescript-min', 'package.json')).version, '4.9.5')
  assert.match(typesNode.version, /^20\./)
  fs.writeFileSync(path.join(dir, 'program.mts'), `
    import { connect, type Lock, type LockInfo, type LockClient } from 'deadbolt'
    import redislock, { type RedisLock } from 'deadbolt/redislock'
    import { initialize, getLock, type LockReleaser } from 'deadbolt/sql-lock'
    export async function run(url: string): Promise<bigint> {
      const locks: LockClient = await connect(url, { connectTimeout: 2_000 })
      const lock: Lock = await locks.acquire('k', { ttl: 5_000 })
      const info: LockInfo | null = await locks.inspect('k')
      await lock[Symbol.asyncDispose]()
      const old: RedisLock = redislock.createLock(url, { timeout: 5_000 })
      const release: (k: string) => Promise<LockReleaser> = getLock
      void old, release, initialize, info
      return lock.fencingToken
    }
  `)
  fs.writeFileSync(path.join(dir, 'program.cts'), `
    import deadbolt = require('deadbolt')
    import redislock = require('deadbolt/redislock')
    import sqlLock = require('deadbolt/sql-lock')
    export const shapes = [typeof deadbolt.connect, typeof redislock.createLock, typeof sqlLock.getLock]
  `)
  for (const module of ['nodenext', 'commonjs']) {
    const files = module === 'commonjs' ? ['program.cts'] : ['program.mts', 'program.cts']
    const moduleResolution = module === 'commonjs' ? 'node' : 'nodenext'
    sh(process.execPath, [tsc, '--noEmit', '--strict', '--skipLibCheck', 'false', '--target', 'es2022', '--module', module, '--moduleResolution', moduleResolution, '--types', 'node', ...files], dir)
  }
})

test("the install guide's platform table lists exactly the targets of napi.targets, each with its npm/ package", () => {
  const readme = fs.readFileSync(path.join(ROOT, 'docs', 'install.md'), 'utf8')
  const rows = [...readme.matchAll(/^\| [^|]+ \| `(deadbolt-[\w-]+)` \| `([\w-]+)` \|$/gm)].map((m) => [m[1], m[2]])
  const { platformOfTarget } = require('../lib/platform')
  assert.deepEqual(rows.map(([, triple]) => triple).sort(), [...pkg.napi.targets].sort())
  for (const [name, triple] of rows) {
    assert.equal(name, `${pkg.name}-${platformOfTarget(triple)}`)
    const manifest = require(path.join(ROOT, 'npm', platformOfTarget(triple), 'package.json'))
    assert.equal(manifest.name, name)
  }
  assert.deepEqual(fs.readdirSync(path.join(ROOT, 'npm')).sort(), pkg.napi.targets.map(platformOfTarget).sort())
})
