#!/usr/bin/env node
// Readies a release, the napi-rs way, for however many targets were built (`napi artifacts`
// and `napi pre-publish` insist on all of them):
//  - moves each built `deadbolt.<platform>.node` (here, or anywhere under `--from DIR`, e.g.
//    the CI artifacts of every target) into its package, npm/<platform>/;
//  - gives every npm/<platform>/package.json the main package's version;
//  - writes the main package's `optionalDependencies`: `deadbolt-<platform>` at that same
//    version for every target in package.json's `napi.targets`, so that npm installs the one
//    that fits (the others are skipped by their `os`/`cpu`/`libc`);
//  - drops the main package's `scripts`: they build, test and release a clone, and an app
//    installing the tarball needs none of them (npm 11 warns about a dependency's lifecycle
//    scripts, `prepare` included, and asks the app to allow them).
// Then `npm publish` each npm/<platform>/ that has its binary, and the main package.
// It edits package.json in place, as `napi pre-publish` does: run it in a release checkout.
// The repository's package.json has no optionalDependencies: `npm ci` refuses a lockfile that
// lacks packages not published yet.
'use strict'
const fs = require('fs')
const path = require('path')
const { platformOfTarget } = require('../lib/platform')

const ROOT = path.join(__dirname, '..')

function readJson(file) {
  return JSON.parse(fs.readFileSync(file, 'utf8'))
}

function writeJson(file, value) {
  fs.writeFileSync(file, JSON.stringify(value, null, 2) + '\n')
}

/** Moves `from` to `to`, also across file systems (CI artifacts on another mount). */
function move(from, to) {
  try {
    fs.renameSync(from, to)
  } catch (err) {
    if (err.code !== 'EXDEV') throw err
    fs.copyFileSync(from, to)
    fs.unlinkSync(from)
  }
}

/** Every file named `name` under `dir`. */
function findAll(dir, name, out = []) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name)
    if (e.isDirectory() && e.name !== 'node_modules') findAll(p, name, out)
    else if (e.name === name) out.push(p)
  }
  return out
}

function main(argv) {
  const from = argv[0] === '--from' ? path.resolve(argv[1]) : null
  const pkgFile = path.join(ROOT, 'package.json')
  const pkg = readJson(pkgFile)
  const platforms = pkg.napi.targets.map(platformOfTarget)
  const ready = []
  for (const platform of platforms) {
    const dir = path.join(ROOT, 'npm', platform)
    const fileName = `${pkg.napi.binaryName}.${platform}.node`
    const manifestFile = path.join(dir, 'package.json')
    if (!fs.existsSync(manifestFile)) throw new Error(`npm/${platform}/package.json is missing: run \`napi create-npm-dirs\``)
    const manifest = readJson(manifestFile)
    if (manifest.name !== `${pkg.name}-${platform}`) throw new Error(`npm/${platform} is named ${manifest.name}, not ${pkg.name}-${platform}`)
    manifest.version = pkg.version
    writeJson(manifestFile, manifest)
    const sources = [path.join(ROOT, fileName), ...(from ? findAll(from, fileName) : [])].filter((f) => fs.existsSync(f))
    if (sources.length > 0) move(sources[0], path.join(dir, fileName))
    if (fs.existsSync(path.join(dir, fileName))) ready.push(platform)
  }
  pkg.optionalDependencies = Object.fromEntries(platforms.map((p) => [`${pkg.name}-${p}`, pkg.version]).sort())
  delete pkg.scripts
  writeJson(pkgFile, pkg)
  console.log(`deadbolt: ${pkg.name}@${pkg.version} depends optionally on ${platforms.length} platform packages`)
  console.log(`deadbolt: with a binary: ${ready.join(', ') || 'none'}`)
  const missing = platforms.filter((p) => !ready.includes(p))
  if (missing.length > 0) console.log(`deadbolt: without one (build them before publishing): ${missing.join(', ')}`)
  if (ready.length === 0) process.exitCode = 1
}

main(process.argv.slice(2))
