'use strict'
// Which prebuilt binary fits this machine, named the way napi-rs names them (binding.js and
// the npm/<platform>/ packages): `linux-x64-gnu`, `darwin-arm64`, `win32-x64-msvc`, … Used to
// explain a missing binary (lib/addon.js) and by the build scripts (scripts/), never on the
// path of a lock operation.

const { readFileSync } = require('fs')

/** The minimum Rust version a source build needs: Cargo.toml's `rust-version` (tested equal). */
const RUST_VERSION = '1.94'

/** Whether this Linux runs musl rather than glibc (the same checks as binding.js, in order). */
function isMusl() {
  if (process.platform !== 'linux') return false
  try {
    return readFileSync('/usr/bin/ldd', 'utf8').includes('musl')
  } catch {
    // No ldd script to read: ask the process report, which names the glibc it runs on.
  }
  if (!process.report || typeof process.report.getReport !== 'function') return false
  process.report.excludeNetwork = true
  const header = process.report.getReport().header
  return !(header && header.glibcVersionRuntime)
}

/** This machine's platform name: `<os>-<arch>[-<abi>]`, as in `deadbolt-<name>`. */
function currentPlatform() {
  const { platform, arch } = process
  if (platform === 'linux') {
    const musl = isMusl()
    if (arch === 'arm') return musl ? 'linux-arm-musleabihf' : 'linux-arm-gnueabihf'
    return `linux-${arch}-${musl ? 'musl' : 'gnu'}`
  }
  if (platform === 'win32') return `win32-${arch}-msvc`
  return `${platform}-${arch}`
}

const ARCH = { x86_64: 'x64', aarch64: 'arm64', i686: 'ia32', armv7: 'arm', riscv64gc: 'riscv64', s390x: 's390x', powerpc64le: 'ppc64', loongarch64: 'loong64' }

/** The platform name of a Rust target triple (package.json's `napi.targets`). */
function platformOfTarget(triple) {
  const [cpu, ...rest] = triple.split('-')
  const arch = ARCH[cpu] ?? cpu
  const sys = rest.join('-')
  if (sys.includes('darwin')) return `darwin-${arch}`
  if (sys.includes('windows')) return `win32-${arch}-${sys.endsWith('gnu') ? 'gnu' : 'msvc'}`
  if (sys.includes('freebsd')) return `freebsd-${arch}`
  if (sys.includes('linux')) return `linux-${arch}-${sys.split('-').pop()}`
  return `${sys}-${arch}`
}

/** The platforms a prebuilt binary is published for, from package.json's `napi.targets`. */
function prebuiltPlatforms() {
  const pkg = require('../package.json')
  return pkg.napi.targets.map(platformOfTarget)
}

/** The name of the package that carries `platform`'s binary, and the binary's file name. */
function binaryNames(platform = currentPlatform()) {
  const pkg = require('../package.json')
  return {
    packageName: `${pkg.name}-${platform}`,
    fileName: `${pkg.napi.binaryName}.${platform}.node`,
    version: pkg.version,
  }
}

/** What a source build needs, in words (the same lines in every message that mentions it). */
function buildRequirements() {
  return [
    `Rust ${RUST_VERSION} or later (https://rustup.rs)`,
    'a C compiler (Debian/Ubuntu: apt-get install build-essential; Fedora: dnf install gcc; ' +
      'macOS: xcode-select --install; Windows: Visual Studio Build Tools with "Desktop development with C++")',
  ]
}

module.exports = { RUST_VERSION, currentPlatform, platformOfTarget, prebuiltPlatforms, binaryNames, buildRequirements }
