'use strict'
// A server clock the nemesis can jump: the server runs with the harness's clock shim preloaded
// (LD_PRELOAD of jepsen/clock-shim.c, built with `cc` on first use), which answers every read
// of the wall clock (CLOCK_REALTIME: what `TIME`, a key's expiry, `UTC_TIMESTAMP()` and
// `clock_timestamp()` use) with the kernel's time plus an offset read through a shared
// mapping of a file, so writing the file moves the clock of every process of the server at
// once, sessions already open included. The monotonic clock is left alone, as a clock stepped
// by NTP or by hand leaves it.
//
// Not libfaketime: Debian's 0.9.10 cannot start redis-server 7.0 (with its own jemalloc:
// "Unexpected recursive calls to clock_gettime()"), and under it a PostgreSQL backend already
// running did not see the offset file change (`clock_timestamp()` of an open session stayed
// put after a jump of an hour), so the `postgres-clock` batches before the shim jumped
// nothing but sessions opened later.

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const crypto = require('node:crypto')
const { execFileSync } = require('node:child_process')

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

/** One server's clock under the shim: starts at the real time, jumps forward by what `jump` adds. */
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

module.exports = { clockShimLib, ClockShim }
