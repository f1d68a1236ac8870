'use strict'
// A server clock the nemesis can jump: the server runs under libfaketime (LD_PRELOAD), which
// reads its offset from a file on every clock call (FAKETIME_NO_CACHE), so writing the file
// moves the server's wall clock at once. Only the wall clock moves (CLOCK_REALTIME, what
// `clock_timestamp()` and a lease's expiry use); the monotonic clock is left alone
// (FAKETIME_DONT_FAKE_MONOTONIC), as a clock stepped by NTP or by hand moves.
//
// Redis cannot run under it here: Debian's libfaketime 0.9.10 and redis-server 7.0 (with its
// own jemalloc) stop at start-up with "Unexpected recursive calls to clock_gettime()". Redis
// and MariaDB run under the harness's own shim instead (`ClockShim`, jepsen/clock-shim.c,
// built with `cc` on first use), which moves the same clocks and resolves nothing at start.

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const crypto = require('node:crypto')
const { execFileSync } = require('node:child_process')

const CANDIDATES = ['/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1', '/usr/lib/faketime/libfaketime.so.1', '/usr/local/lib/faketime/libfaketime.so.1']

/** The path of libfaketime, or null when it is not installed (Debian package `faketime`). */
function faketimeLib() {
  return CANDIDATES.find((p) => fs.existsSync(p)) ?? null
}

/** One server's fake clock: starts at the real time, jumps forward by what `jump` adds. */
class Faketime {
  constructor() {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-jepsen-faketime-'))
    this.file = path.join(this.dir, 'offset')
    this.offsetMs = 0
    this.write()
  }

  /** The environment a server must be started with. */
  env() {
    return { LD_PRELOAD: faketimeLib(), FAKETIME_TIMESTAMP_FILE: this.file, FAKETIME_NO_CACHE: '1', FAKETIME_DONT_FAKE_MONOTONIC: '1' }
  }

  write() {
    const tmp = `${this.file}.tmp`
    fs.writeFileSync(tmp, `+${(this.offsetMs / 1000).toFixed(3)}\n`)
    fs.renameSync(tmp, this.file)
  }

  /** Moves the server's wall clock forward by `ms` (it stays there: time does not go back). */
  jump(ms) {
    this.offsetMs += ms
    this.write()
  }

  destroy() { fs.rmSync(this.dir, { recursive: true, force: true }) }
}

const SHIM_SRC = path.join(__dirname, 'clock-shim.c')
let shimBuilt

/**
 * The path of the clock shim, built from jepsen/clock-shim.c into the temporary directory
 * (once per source: the file name carries its hash), or null when there is no C compiler.
 */
function clockShimLib() {
  if (shimBuilt !== undefined) return shimBuilt
  const src = fs.readFileSync(SHIM_SRC)
  const hash = crypto.createHash('sha256').update(src).digest('hex').slice(0, 16)
  const out = path.join(os.tmpdir(), `deadbolt-jepsen-clock-shim-${hash}.so`)
  if (!fs.existsSync(out)) {
    const tmp = `${out}.${process.pid}.tmp`
    try {
      execFileSync('cc', ['-shared', '-fPIC', '-O2', '-o', tmp, SHIM_SRC], { stdio: 'ignore' })
      fs.renameSync(tmp, out)
    } catch {
      fs.rmSync(tmp, { force: true })
      shimBuilt = null
      return null
    }
  }
  // The servers may run as another user (MariaDB as `mysql`): readable by all.
  fs.chmodSync(out, 0o755)
  shimBuilt = out
  return out
}

/**
 * One server's clock under the shim: starts at the real time, jumps forward by what `jump`
 * adds. The same shape as `Faketime`.
 */
class ClockShim {
  constructor() {
    this.lib = clockShimLib()
    if (this.lib === null) throw new Error('the clock shim needs a C compiler (cc): scripts/services.sh tools')
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-jepsen-clock-'))
    // Readable by a server that runs as another user (MariaDB as `mysql`).
    fs.chmodSync(this.dir, 0o755)
    this.file = path.join(this.dir, 'offset')
    this.offsetMs = 0
    this.fd = fs.openSync(this.file, 'w+', 0o644)
    this.write()
  }

  /** The environment a server must be started with. */
  env() {
    return { LD_PRELOAD: this.lib, DEADBOLT_CLOCK_FILE: this.file }
  }

  write() {
    const b = Buffer.alloc(8)
    b.writeBigInt64LE(BigInt(this.offsetMs))
    // One aligned 8-byte write in place: the servers' mappings see it whole.
    fs.writeSync(this.fd, b, 0, 8, 0)
  }

  /** Moves the server's wall clock forward by `ms` (it stays there: time does not go back). */
  jump(ms) {
    this.offsetMs += ms
    this.write()
  }

  destroy() {
    try { fs.closeSync(this.fd) } catch {}
    fs.rmSync(this.dir, { recursive: true, force: true })
  }
}

module.exports = { faketimeLib, Faketime, clockShimLib, ClockShim }
