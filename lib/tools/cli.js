'use strict'
// The operator's CLI: `deadbolt <command> <url> [args]`. Each command is a function of the
// parsed arguments and an output sink; `bin/deadbolt.js` wires it to the process. Exit codes:
// 0 done, 1 nothing there (no holder, nothing to free), 2 usage error, 3 the store failed.

const readline = require('readline')
const { connect } = require('../client')
const { stores } = require('../addon')
const { MAX_PERMITS } = require('../semaphore')
const { holderText, holderFields } = require('../identity')
const { Sightings, readFrame, listSome, renderFrame, parseSemaphore, MAX_LIMIT } = require('./view')
const { serveDashboard } = require('./dashboard')
const jobsCli = require('./cli-jobs')
const { visible, jsonLine } = require('./printable')

// The stores this build has (src/store/registry.rs).
const STORES = stores()

const EXIT = Object.freeze({ ok: 0, none: 1, usage: 2, store: 3 })
/** The longest --interval: Node's timers take at most 2^31 - 1 ms (a longer one fires at once). */
const MAX_INTERVAL = 2 ** 31 - 1

const HELP = {
  main: `Usage: deadbolt <command> <url> [arguments] [--json]

Commands:
  inspect <url> <key>            who holds a lock: holder, fencing token, remaining lease, data
  list <url> [prefix]            held locks (whose names start with prefix)
  release <url> --force <key>    free a lock whoever holds it (asks first unless --yes)
  watch <url> <key>              print every change of holder as it happens (Ctrl-C stops)
  leader <url> <name>            the current leader of an election
  permits <url> <name>           who holds permits of a semaphore (or a read-write lock)
  top <url>                      a live view of held locks, semaphores and leaders
  dashboard <url>                the same live view as a web page
  jobs <url> [prefix]            the last run of each scheduled job: outcome, who ran it, next due

<url> is a store URL (${STORES.map((e) => e.example).join(', ')}; dynamodb:// with AWS
credentials from the environment); DEADBOLT_URL is used when it is "-". Options: --json (machine-readable output), --table NAME (${STORES.filter((e) => e.options.includes('table')).map((e) => e.name).join(', ')}: the lock table, default deadbolt_locks), --help (help for a command).
On MySQL and PostgreSQL, commands that only look (all but release) never create a table, and on SQLite no file: one that does not exist holds no lock.
deadbolt help <command> prints a command's help; deadbolt --version (-v) prints the version.
Exit codes: 0 done, 1 nothing there, 2 usage error, 3 the store failed.`,
  inspect: 'Usage: deadbolt inspect <url> <key> [--json]\nPrints the holder, fencing token, remaining lease and data of <key>; exit 1 if it is free.',
  list: 'Usage: deadbolt list <url> [prefix] [--limit N] [--json]\nPrints the held locks whose names start with prefix (default: all), at most N (default 1000),\nand says when more are held.',
  release: 'Usage: deadbolt release <url> --force <key> [--yes] [--json]\nFrees <key> whoever holds it; its holder learns it lost the lock at its next heartbeat.\nAsks for confirmation unless --yes; exit 1 if nothing was held.',
  watch: 'Usage: deadbolt watch <url> <key> [--interval MS] [--json]\nPrints a line each time the holder of <key> changes (polled every MS ms, default 200).',
  leader: 'Usage: deadbolt leader <url> <name> [--json]\nPrints the current leader of election <name> (its data and term); exit 1 if there is none.',
  permits: 'Usage: deadbolt permits <url> <name> [--json]\nPrints the holders of semaphore (or read-write lock) <name>: owner, permits, fencing token, remaining lease; exit 1 if nobody holds any.',
  top: `Usage: deadbolt top <url> [--prefix P] [--semaphore NAME[=LIMIT]]... [--election NAME]... [--once] [--json] [--interval MS] [--limit N]
A live view, redrawn every second (--interval): held locks (key, holder, token, lease left, held
for), the semaphores and elections named (stores keep no list of them, nor a semaphore's limit),
filtered by --prefix, at most N locks (--limit, default 1000; it says when more are held). What
the store cannot tell shows as –; "held for" is what this view saw
(≥: the lock was already held when it started). --once prints one frame and exits; --json prints
frames as JSON, one a line. Ctrl-C quits.`,
  dashboard: `Usage: deadbolt dashboard <url> [--port 4700] [--host 127.0.0.1] [--allow-release] [--prefix P] [--semaphore NAME[=LIMIT]]... [--election NAME]... [--interval MS] [--limit N]
Serves the live view of \`top\` as a web page (Server-Sent Events, a frame every MS ms, default 1000), with a filter box, a lease bar per
lock and a chart of holds, grants and expiries this process saw. Read-only unless --allow-release,
which adds force-release buttons (with a confirmation) and prints an audit line per release.
Bound to loopback; with --host another address it asks for the token it prints at start.`,
  jobs: jobsCli.HELP,
}

class UsageError extends Error {}

/** Splits argv into positionals and flags (`--json`, `--yes`, `--force`, `--limit N`, …). */
function parse(argv) {
  const positional = []
  const flags = {}
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    if (a === '--json' || a === '--yes' || a === '--force' || a === '--help' || a === '--version' || a === '--once') {
      flags[a.slice(2)] = true
    } else if (a === '--allow-release') {
      flags.allowRelease = true
    } else if (a === '--port') {
      // Digits only: Number('') is 0 (a random port), Number('0x10') 16.
      const raw = argv[++i]
      const v = /^[0-9]{1,5}$/.test(raw ?? '') ? Number(raw) : NaN
      if (!(v <= 65535)) throw new UsageError('--port needs a port number (0 to 65535)')
      flags.port = v
    } else if (a === '--prefix' || a === '--host') {
      const v = argv[++i]
      // An empty --host would listen on every address.
      if (v === undefined || (a === '--host' && v === '')) throw new UsageError(`${a} needs a value`)
      flags[a.slice(2)] = v
    } else if (a === '--semaphore' || a === '--election') {
      const v = argv[++i]
      if (v === undefined || v === '') throw new UsageError(`${a} needs a name`)
      const list = a === '--semaphore' ? 'semaphores' : 'elections'
      flags[list] = [...(flags[list] ?? []), v]
    } else if (a === '-h' || a === '-v') {
      flags[a === '-h' ? 'help' : 'version'] = true
    } else if (a === '--limit' || a === '--interval') {
      const v = Number(argv[++i])
      if (!Number.isInteger(v) || v < 1) throw new UsageError(`${a} needs a positive whole number`)
      const max = a === '--limit' ? MAX_LIMIT : MAX_INTERVAL
      if (v > max) throw new UsageError(`${a} is at most ${max}${a === '--interval' ? ' ms (about 24.8 days)' : ''}`)
      flags[a.slice(2)] = v
    } else if (a === '--table') {
      const v = argv[++i]
      if (v === undefined || v.startsWith('--')) throw new UsageError('--table needs a table name')
      flags.table = v
    } else if (a.startsWith('--')) {
      throw new UsageError(`unknown option ${a}`)
    } else {
      positional.push(a)
    }
  }
  return { positional, flags }
}

/**
 * An error's message for stderr: it may quote a key or a server's words, so each of its lines
 * goes through `visible` (a message of several lines keeps them).
 */
function message(err) {
  return String(err?.message ?? err).split('\n').map(visible).join('\n')
}

/** Names and owners come from other processes: every text line shows them through `visible`. */
function describe(info) {
  const token = info.fencingToken === null ? 'unknown' : String(info.fencingToken)
  const data = info.data === null ? '' : `  data: ${Buffer.isBuffer(info.data) ? `<${info.data.length} bytes>` : jsonLine(info.data)}`
  return `${visible(info.key)}  holder: ${visible(info.owner)}  token: ${token}  remaining: ${info.remainingMs} ms${visible(holderFields(info.holder))}${data}`
}

function asJson(info) {
  if (info === null) return null
  return {
    key: info.key,
    owner: info.owner,
    holder: info.holder,
    fencingToken: info.fencingToken === null ? null : String(info.fencingToken),
    remainingMs: info.remainingMs,
    data: info.data === null ? null : Buffer.isBuffer(info.data) ? { base64: info.data.toString('base64') } : info.data,
  }
}

function table(rows) {
  if (rows.length === 0) return ''
  const head = ['KEY', 'HOLDER', 'TOKEN', 'REMAINING MS']
  const body = rows.map((i) => [visible(i.key), visible(holderText(i.holder) ?? i.owner), i.fencingToken === null ? '-' : String(i.fencingToken), String(i.remainingMs)])
  const widths = head.map((h, c) => Math.max(h.length, ...body.map((r) => r[c].length)))
  return [head, ...body].map((r) => r.map((cell, c) => cell.padEnd(widths[c])).join('  ').trimEnd()).join('\n')
}

async function confirm(io, question) {
  if (!io.stdin.isTTY) return false
  const rl = readline.createInterface({ input: io.stdin, output: io.stderr })
  const answer = await new Promise((resolve) => rl.question(question, resolve))
  rl.close()
  return /^y(es)?$/i.test(answer.trim())
}

const COMMANDS = {
  jobs: jobsCli.command,
  async inspect(locks, [key], flags, io) {
    if (key === undefined) throw new UsageError('inspect needs a <key>')
    const info = await locks.inspect(key)
    io.out(flags.json ? jsonLine(asJson(info)) : info === null ? `${visible(key)} is free` : describe(info))
    return info === null ? EXIT.none : EXIT.ok
  },

  async permits(locks, [name], flags, io) {
    if (name === undefined) throw new UsageError('permits needs a semaphore <name>')
    // Reading the holders needs no limit: the largest one stands in for whatever it is.
    const holders = await locks.semaphore(name, { limit: MAX_PERMITS }).holders()
    holders.sort((a, b) => (a.fencingToken < b.fencingToken ? -1 : 1))
    const rows = holders.map((h) => ({ owner: h.owner, holder: h.holder, permits: h.permits, fencingToken: String(h.fencingToken), remainingMs: h.remainingMs }))
    if (flags.json) io.out(jsonLine(rows))
    else if (rows.length === 0) io.out(`nobody holds permits of ${visible(name)}`)
    else io.out(rows.map((r) => `${visible(name)}  holder: ${visible(r.owner)}  permits: ${r.permits === MAX_PERMITS ? 'all (a writer)' : r.permits}  token: ${r.fencingToken}  remaining: ${r.remainingMs} ms${visible(holderFields(r.holder))}`).join('\n'))
    return rows.length === 0 ? EXIT.none : EXIT.ok
  },

  async list(locks, [prefix = ''], flags, io) {
    const limit = flags.limit ?? 1000
    const { held, more } = await listSome(locks, prefix, limit)
    held.sort((a, b) => a.key.localeCompare(b.key))
    if (flags.json) io.out(jsonLine(held.map(asJson)))
    else io.out(held.length === 0 ? 'no held locks' : table(held))
    // On stderr with --json, whose output stays an array.
    if (more) (flags.json ? io.err : io.out)(`${held.length} shown; more are held (--limit shows more, at most ${MAX_LIMIT})`)
    return EXIT.ok
  },

  async release(locks, [key], flags, io) {
    if (!flags.force) throw new UsageError('release frees a lock someone else holds: say --force')
    if (key === undefined) throw new UsageError('release needs a <key>')
    if (!flags.yes) {
      const info = await locks.inspect(key)
      if (info === null) {
        io.out(flags.json ? jsonLine({ key, released: false }) : `${visible(key)} is free`)
        return EXIT.none
      }
      if (!(await confirm(io, `Free ${visible(key)}, held by ${visible(holderText(info.holder) ?? info.owner)}? [y/N] `))) {
        io.err('not released (pass --yes to skip the question)')
        return EXIT.usage
      }
    }
    const released = await locks.forceRelease(key)
    io.out(flags.json ? jsonLine({ key, released }) : released ? `released ${visible(key)}` : `${visible(key)} was free`)
    return released ? EXIT.ok : EXIT.none
  },

  async watch(locks, [key], flags, io) {
    if (key === undefined) throw new UsageError('watch needs a <key>')
    let last
    for (;;) {
      const info = await locks.inspect(key)
      const holder = info === null ? null : `${info.owner}/${info.fencingToken}`
      if (holder !== last) {
        last = holder
        const at = new Date().toISOString()
        if (flags.json) io.out(jsonLine({ at, ...(asJson(info) ?? { key, owner: null }) }))
        else io.out(`${at}  ${info === null ? `${visible(key)} is free` : describe(info)}`)
      }
      if (io.stopped()) return EXIT.ok
      await new Promise((resolve) => setTimeout(resolve, flags.interval ?? 200))
    }
  },

  async top(locks, args, flags, io) {
    if (args.length > 0) throw new UsageError(`top takes no arguments after the URL (a prefix is --prefix ${args[0]})`)
    const what = viewOf(flags)
    const sightings = new Sightings()
    const where = locks.toJSON().store
    for (;;) {
      let frame
      try {
        frame = await readFrame(locks, what)
      } catch (err) {
        // One look (--once) reports a store failure by its exit code; a live view says so
        // and looks again at the next refresh, as the dashboard does.
        if (flags.once || err.code !== 'ERR_LOCK_BACKEND') throw err
        const at = Date.now()
        const failure = { code: err.code, cause: err.cause?.code ?? null, message: err.message }
        if (flags.json) io.out(jsonLine({ at, error: failure }))
        else {
          const line = `${new Date(at).toISOString()}  the store failed (${failure.cause ?? failure.code}): ${visible(failure.message)}; looking again`
          io.write(io.tty ? `\x1b[H${line}\x1b[K\x1b[J` : `${line}\n`)
        }
        await io.sleep(flags.interval ?? 1000)
        if (io.stopped()) return EXIT.ok
        continue
      }
      frame.locks = sightings.see(frame.locks, frame.at)
      if (flags.json) io.out(jsonLine(frame))
      else if (flags.once || !io.tty) io.out(renderFrame(frame, where))
      // Home, draw, then clear what the previous, longer frame left below.
      else io.write(`\x1b[H${renderFrame(frame, where, io.columns()).replaceAll('\n', '\x1b[K\n')}\x1b[K\x1b[J`)
      if (flags.once || io.stopped()) return EXIT.ok
      await io.sleep(flags.interval ?? 1000)
      if (io.stopped()) return EXIT.ok
    }
  },

  async dashboard(locks, args, flags, io) {
    if (args.length > 0) throw new UsageError(`dashboard takes no arguments after the URL (a prefix is --prefix ${args[0]})`)
    const server = await serveDashboard(locks, {
      port: flags.port ?? 4700,
      host: flags.host ?? '127.0.0.1',
      allowRelease: flags.allowRelease === true,
      interval: flags.interval ?? 1000,
      what: viewOf(flags),
      audit: (line) => io.out(line),
      notice: (line) => io.out(line),
    })
    io.out(`dashboard: ${server.url}`)
    if (server.token !== null) io.out(`token: ${server.token} (the page asks for it; it is in the address above)`)
    await io.until()
    await server.close()
    return EXIT.ok
  },

  async leader(locks, [name], flags, io) {
    if (name === undefined) throw new UsageError('leader needs a <name>')
    const info = await locks.leader(name)
    if (flags.json) io.out(jsonLine(asJson(info)))
    else io.out(info === null ? `${visible(name)} has no leader` : `${visible(name)}  leader: ${visible(info.owner)}  term: ${info.fencingToken ?? 'unknown'}${visible(holderFields(info.holder))}${info.data === null ? '' : `  data: ${jsonLine(Buffer.isBuffer(info.data) ? info.data.toString('base64') : info.data)}`}`)
    return info === null ? EXIT.none : EXIT.ok
  },
}

/** What top and the dashboard show, from the flags. */
function viewOf(flags) {
  return { prefix: flags.prefix ?? '', limit: flags.limit ?? 1000, semaphores: (flags.semaphores ?? []).map(parseSemaphore), elections: flags.elections ?? [] }
}

/**
 * Runs the CLI on `argv` (without node and the script). `io`: { out(line), err(line), stdin,
 * env, stopped(), and for top and dashboard: tty, write(text), columns(), sleep(ms) (cut short
 * by a stop), until() (resolves at a stop) }. Resolves with the exit code.
 */
async function main(argv, io) {
  let parsed
  try {
    parsed = parse(argv)
  } catch (err) {
    io.err(`deadbolt: ${err.message}\n\n${HELP.main}`)
    return EXIT.usage
  }
  const { positional, flags } = parsed
  const [command, rawUrl, ...args] = positional
  if (flags.version) {
    // package.json, not a copy: the version npm installed is the one printed.
    io.out(require('../../package.json').version)
    return EXIT.ok
  }
  if (command === 'help' && rawUrl !== undefined) {
    // `deadbolt help <command>`: the same text as `deadbolt <command> --help`.
    if (!Object.hasOwn(COMMANDS, rawUrl)) {
      io.err(`deadbolt: unknown command "${rawUrl}"\n\n${HELP.main}`)
      return EXIT.usage
    }
    io.out(HELP[rawUrl])
    return EXIT.ok
  }
  if (command === undefined || command === 'help') {
    io.out(HELP.main)
    return flags.help || command === 'help' ? EXIT.ok : EXIT.usage
  }
  const run = Object.hasOwn(COMMANDS, command) ? COMMANDS[command] : undefined
  if (run === undefined) {
    io.err(`deadbolt: unknown command "${command}"\n\n${HELP.main}`)
    return EXIT.usage
  }
  if (flags.help) {
    io.out(HELP[command])
    return EXIT.ok
  }
  const url = rawUrl === '-' || rawUrl === undefined ? io.env.DEADBOLT_URL : rawUrl
  if (!url) {
    io.err(`deadbolt: ${command} needs a store URL (or DEADBOLT_URL)\n\n${HELP[command]}`)
    return EXIT.usage
  }
  let locks
  try {
    // Lazy: connecting checks the store with a ping, which on the SQL stores creates the lock
    // table. The commands' own reads create nothing (a missing table holds no lock), so a
    // command that only looks never runs DDL; a store that cannot be reached fails the
    // command's first call instead, with the same error.
    locks = await connect(url, { connectTimeout: 5000, lazy: true, ...(flags.table === undefined ? {} : { table: flags.table }) })
  } catch (err) {
    io.err(`deadbolt: ${message(err)}`)
    return err.code === 'ERR_LOCK_BACKEND' ? EXIT.store : EXIT.usage
  }
  try {
    return await run(locks, args, flags, io)
  } catch (err) {
    if (err instanceof UsageError) {
      io.err(`deadbolt: ${err.message}\n\n${HELP[command]}`)
      return EXIT.usage
    }
    io.err(`deadbolt: ${message(err)}`)
    return err.code === 'ERR_LOCK_BACKEND' ? EXIT.store : EXIT.usage
  } finally {
    await locks.close()
  }
}

/** Whether `argv` runs a command that runs until stopped (watch, top, dashboard). */
function runsUntilStopped(argv) {
  try {
    return ['watch', 'top', 'dashboard'].includes(parse(argv).positional[0])
  } catch {
    return false
  }
}

module.exports = { main, runsUntilStopped, EXIT }
