'use strict'
// A server clock the nemesis can jump: the server runs under libfaketime (LD_PRELOAD), which
// reads its offset from a file on every clock call (FAKETIME_NO_CACHE), so writing the file
// moves the server's wall clock at once. Only the wall clock moves (CLOCK_REALTIME, what
// `clock_timestamp()` and a lease's expiry use); the monotonic clock is left alone
// (FAKETIME_DONT_FAKE_MONOTONIC), as a clock stepped by NTP or by hand moves.
//
// Redis cannot run under it here: Debian's libfaketime 0.9.10 and redis-server 7.0 (with its
// own jemalloc) stop at start-up with "Unexpected recursive calls to clock_gettime()".

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

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

module.exports = { faketimeLib, Faketime }
