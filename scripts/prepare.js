#!/usr/bin/env node
// The `prepare` lifecycle script. npm runs it on `npm install`/`npm ci` in a clone, when it
// installs deadbolt from git, and on `npm pack`/`npm publish`; never when an app installs the
// published tarball, which gets its binary from the `deadbolt-<platform>` optional dependency.
//
//  - `npm pack` / `npm publish`: builds nothing. A release moves the binaries into the
//    npm/<platform>/ packages first (scripts/artifacts.js); a binary already built here ships
//    as it is (a git install), and building one now would cost minutes for nothing.
//  - a prebuilt binary for this platform is installed (node_modules/deadbolt-<platform>):
//    builds nothing.
//  - a Rust toolchain is there: builds the addon from source (release profile).
//  - otherwise: says what this machine lacks and how to build, and fails.
// DEADBOLT_SKIP_BUILD=1 skips all of it (for example when only JavaScript dependencies changed).
'use strict'
const { spawnSync } = require('child_process')
const fs = require('fs')
const path = require('path')
const { RUST_VERSION, currentPlatform, prebuiltPlatforms, binaryNames, buildRequirements } = require('../lib/platform')

const ROOT = path.join(__dirname, '..')
// On stderr: `npm pack --json` prints lifecycle scripts' stdout into its JSON.
const say = (line) => console.error(`deadbolt: ${line}`)

function fail(lines) {
  console.error(lines.map((l) => `deadbolt: ${l}`).join('\n'))
  process.exit(1)
}

/** Whether the prebuilt package for this platform is installed and loads. */
function prebuiltInstalled(packageName) {
  try {
    require(require.resolve(packageName, { paths: [ROOT] }))
    return true
  } catch {
    return false
  }
}

/** `[major, minor]` of the rustc on PATH, or null without one. */
function rustcVersion() {
  const r = spawnSync('rustc', ['--version'], { encoding: 'utf8' })
  const m = r.status === 0 && /^rustc (\d+)\.(\d+)/.exec(r.stdout)
  return m ? [Number(m[1]), Number(m[2])] : null
}

function main() {
  if (process.env.DEADBOLT_SKIP_BUILD === '1') return say('DEADBOLT_SKIP_BUILD=1, not building the addon')
  const platform = currentPlatform()
  const { packageName, fileName } = binaryNames(platform)
  const local = fs.existsSync(path.join(ROOT, fileName))
  const command = process.env.npm_command
  if (command === 'pack' || command === 'publish') {
    return say(`npm ${command} does not build the addon (${local ? `${fileName} is already built` : 'the deadbolt-<platform> packages carry the binaries'})`)
  }
  if (prebuiltInstalled(packageName)) return say(`using the prebuilt binary of ${packageName}; not building from source`)

  const how = [
    `A source build needs ${buildRequirements().join(', and ')}.`,
    'Then run `npm install` (or `npm run build`) here again.',
  ]
  const hasSources = fs.existsSync(path.join(ROOT, 'Cargo.toml')) && fs.existsSync(path.join(ROOT, 'src'))
  const rustc = rustcVersion()
  if (!hasSources || rustc === null) {
    if (local) return say(`no Rust toolchain here; keeping the ${fileName} already built (it may be out of date)`)
    const prebuilt = prebuiltPlatforms()
    return fail([
      `no native binary for ${platform}, and ${hasSources ? 'no Rust toolchain (rustc) on PATH' : 'no Rust sources here'} to build one.`,
      prebuilt.includes(platform)
        ? `Apps get the prebuilt ${packageName} from npm; in a clone the addon is built from source.`
        : `No prebuilt binary is published for ${platform} (there are for ${prebuilt.join(', ')}).`,
      ...how,
      'To skip this step (JavaScript-only work): DEADBOLT_SKIP_BUILD=1 npm install',
    ])
  }
  const [want, wantMinor] = RUST_VERSION.split('.').map(Number)
  if (rustc[0] < want || (rustc[0] === want && rustc[1] < wantMinor)) {
    return fail([`Rust ${rustc.join('.')} is too old to build the addon: it needs ${RUST_VERSION} or later (rustup update).`, ...how])
  }

  say(`building the addon from source for ${platform} (release; a few minutes the first time)`)
  let napi
  try {
    napi = path.join(path.dirname(require.resolve('@napi-rs/cli/package.json', { paths: [ROOT] })), 'dist', 'cli.js')
  } catch {
    return fail(['@napi-rs/cli is not installed: run `npm install` (with dev dependencies) in this clone first.'])
  }
  const args = [napi, 'build', '--platform', '--release', '--js', 'binding.js', '--dts', 'binding.d.ts']
  const r = spawnSync(process.execPath, args, { cwd: ROOT, stdio: 'inherit' })
  if (r.status !== 0) fail([`the source build failed (exit ${r.status ?? r.signal ?? r.error?.message}).`, ...how])
}

main()
