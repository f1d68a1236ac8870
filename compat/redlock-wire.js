'use strict'
// node-redlock's wire format, shared by the v5 face (compat/redlock.js) and the v4 face
// (compat/redlock-v4.js). Both faces run on the Redis clients the caller gives (ioredis,
// ioredis Cluster, node-redis 4/5 and their clusters, node_redis 3), not on deadbolt's native
// engine: node-redlock's API reports every server's vote per attempt (votesFor/votesAgainst,
// keyed by the caller's own client objects, with that client's own errors) and locks several
// resources in one script per server, which the engine's one-key-per-call Redlock does not.
//
// On the wire this is node-redlock, byte for byte where it matters to a process running the
// original: each resource name is the key, unprefixed; the value is 16 random bytes in hex,
// one per lock and the same on every key and server; a grant sets every key of the lock to
// that value with PX duration when none of them exists; an extension re-sets every key with
// PX when all of them still hold the value; a release deletes the keys that hold it. So an
// original process and a face process exclude each other on any shared resource. The Lua is
// deadbolt's own (the script hashes differ from the original's; that changes nothing on the
// keys).

const { randomFillSync, createHash } = require('crypto')

/** Grant: all keys absent → each set to ARGV[1] for ARGV[2] ms; the number of keys, else 0. */
const ACQUIRE = `-- deadbolt/redlock grant
for _, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then return 0 end
end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
end
return #KEYS
`

/** Extension: all keys hold ARGV[1] → each re-set for ARGV[2] ms; the number of keys, else 0. */
const EXTEND = `-- deadbolt/redlock extension
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) ~= ARGV[1] then return 0 end
end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
end
return #KEYS
`

/** Release: every key holding ARGV[1] is deleted; the number deleted. */
const RELEASE = `-- deadbolt/redlock release
local freed = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('DEL', key)
    freed = freed + 1
  end
end
return freed
`

/** A script as sent: its text and the SHA1 EVALSHA names it by. */
function script(value) {
  return { value, hash: createHash('sha1').update(value).digest('hex') }
}

/** The text of a script: the default, or what a caller's modifier function makes of it. */
function customScript(base, modifier) {
  return typeof modifier === 'function' ? modifier(base) : base
}

// Lock values are drawn from the CSPRNG 64 at a time (node-redlock calls randomBytes(16) per
// lock: one getrandom() system call each, ~6 % of its CPU under load). The bytes are the same
// kind; each is used once. Node's crypto.randomUUID() batches the same way.
const POOL_VALUES = 64
const pool = Buffer.alloc(16 * POOL_VALUES)
let poolNext = POOL_VALUES

/** A lock's value: 16 random bytes in hex, as node-redlock draws it. */
function randomValue() {
  if (poolNext === POOL_VALUES) {
    randomFillSync(pool)
    poolNext = 0
  }
  const at = 16 * poolNext++
  const value = pool.toString('hex', at, at + 16)
  // Used once: wiped so that no later read of the pool finds a value in use.
  pool.fill(0, at, at + 16)
  return value
}

/** Which client library `client` comes from: 'ioredis', 'node-redis' (4/5) or 'node-redis3'. */
function kindOf(client) {
  if (client === null || typeof client !== 'object') return null
  if (typeof client.evalSha === 'function') return 'node-redis'
  if (typeof client.evalsha === 'function') {
    // ioredis (Redis and Cluster) defines Lua commands; node_redis 3 takes callbacks only.
    return typeof client.defineCommand === 'function' ? 'ioredis' : 'node-redis3'
  }
  return null
}

/** ioredis sockets corked until the end of the current tick (see batchWrites). */
const corked = new WeakSet()

function uncork(stream) {
  corked.delete(stream)
  stream.uncork()
}

/**
 * Lets the commands an ioredis connection is given during this tick leave in one write: its
 * socket is corked until process.nextTick, which runs once the current callback and its
 * promise jobs are done. ioredis writes every command with a write() system call of its own
 * (unless the caller enabled its autopipelining); with 100 locks in flight those writes were a
 * third of node-redlock's CPU. node-redis batches the same way by default. The commands, their
 * order on the connection and the replies are unchanged; a command waits at most for the rest
 * of the tick it was issued in. Clusters (no single socket) and mocks are left alone.
 */
function batchWrites(client) {
  const stream = client.stream
  if (stream === null || typeof stream !== 'object' || typeof stream.cork !== 'function') return
  if (client.status !== 'ready' || corked.has(stream)) return
  corked.add(stream)
  stream.cork()
  process.nextTick(uncork, stream)
}

/** Runs one EVALSHA (`sha`) or EVAL (`body`) on `client`: its raw reply. */
function call(client, kind, command, target, keys, args) {
  if (kind === 'ioredis') {
    batchWrites(client)
    return client[command](target, keys.length, ...keys, ...args)
  }
  if (kind === 'node-redis') {
    const opts = { keys, arguments: args.map(String) }
    return command === 'evalsha' ? client.evalSha(target, opts) : client.eval(target, opts)
  }
  return new Promise((resolve, reject) => {
    client[command](target, keys.length, ...keys, ...args, (err, reply) => (err ? reject(err) : resolve(reply)))
  })
}

/**
 * Runs `s` on `client` by its hash, and by its text when the server does not have it yet
 * (NOSCRIPT). Resolves the script's integer reply as a number (node_redis 3 with
 * string_numbers answers a string).
 */
async function runScript(client, s, keys, args) {
  const kind = kindOf(client)
  let reply
  try {
    reply = await call(client, kind, 'evalsha', s.hash, keys, args)
  } catch (err) {
    if (!(err instanceof Error) || !String(err.message).startsWith('NOSCRIPT')) throw err
    reply = await call(client, kind, 'eval', s.value, keys, args)
  }
  if (typeof reply === 'string' && /^\d+$/.test(reply)) reply = Number(reply)
  if (typeof reply !== 'number') throw new Error(`Unexpected result of type ${typeof reply} returned from redis.`)
  return reply
}

/** Closes a client the way its library does (node_redis 3 by callback). */
function quitClient(client) {
  const kind = kindOf(client)
  if (kind === 'node-redis3') return new Promise((resolve, reject) => client.quit((err) => (err ? reject(err) : resolve())))
  return client.quit()
}

/**
 * A client for a `redis://` or `rediss://` URL, from the application's ioredis or, without it,
 * its node-redis (4 or 5). The face owns it: quit() closes it with the others.
 */
function clientForUrl(url) {
  let Redis = null
  try {
    Redis = require('ioredis')
  } catch {
    // No ioredis: node-redis below.
  }
  if (Redis !== null) return new Redis(url)
  let createClient
  try {
    ({ createClient } = require('redis'))
  } catch {
    const err = new TypeError('A Redis URL needs the ioredis or the redis package installed beside deadbolt; or pass a client')
    err.code = 'ERR_INVALID_ARG_VALUE'
    throw err
  }
  const client = createClient({ url })
  // node-redis queues commands from connect() on; a failure shows in each vote.
  client.on('error', () => {})
  client.connect().catch(() => {})
  return client
}

/**
 * The caller's clients as given (an iterable of clients or URLs), each checked to be one this
 * face can drive. URLs become clients of the face's own.
 */
function toClients(clients, name = 'clients') {
  if (clients === null || clients === undefined || typeof clients[Symbol.iterator] !== 'function' || typeof clients === 'string') {
    const err = new TypeError(`The "${name}" argument must be an iterable of Redis clients or redis:// URLs`)
    err.code = 'ERR_INVALID_ARG_TYPE'
    throw err
  }
  const out = []
  for (const c of clients) {
    if (typeof c === 'string') {
      if (!/^rediss?:\/\//i.test(c)) {
        const err = new TypeError(`The argument '${name}' must hold Redis clients or redis:// or rediss:// URLs`)
        err.code = 'ERR_INVALID_ARG_VALUE'
        throw err
      }
      out.push({ client: clientForUrl(c), owned: true })
    } else if (kindOf(c) === null) {
      const err = new TypeError(`The argument '${name}' must hold ioredis or node-redis clients (or clusters) or redis:// URLs`)
      err.code = 'ERR_INVALID_ARG_VALUE'
      throw err
    } else {
      out.push({ client: c, owned: false })
    }
  }
  return out
}

/** Redlock's quorum: a strict majority of `n`. */
function quorumOf(n) {
  return Math.floor(n / 2) + 1
}

/**
 * One round of `s` on every client. Resolves as soon as the outcome is decided, with
 * `{ vote: 'for' | 'against', start, stats, live, refused }`: `start` is when this round was
 * sent (the validity of a grant is reckoned from it), `stats` a promise of the round's
 * ExecutionStats, resolved once every client answered, `live` those stats as they fill in, and
 * `refused` how many refusals were in at the decision. A client's vote is for when the
 * script reports every key (`expect` = the number of keys). Against otherwise, with that
 * client's error, or `refusal(reply)` when the script answered fewer; `onError(err, refused)`
 * sees every such error. Unlike node-redlock, a round whose votes are all in without a quorum either way
 * (an even number of clients split in two) is against, not pending forever.
 */
function round(clients, s, keys, args, refusal, onError) {
  const start = Date.now()
  const stats = {
    membershipSize: clients.length,
    quorumSize: quorumOf(clients.length),
    votesFor: new Set(),
    votesAgainst: new Map(),
  }
  let refused = 0
  return new Promise((resolve) => {
    let decided = false
    let allIn
    const statsP = new Promise((r) => { allIn = () => r(stats) })
    const decide = (vote) => {
      if (decided) return
      decided = true
      resolve({ vote, start, stats: statsP, live: stats, refused })
    }
    const tally = () => {
      if (stats.votesFor.size >= stats.quorumSize) decide('for')
      else if (stats.votesAgainst.size >= stats.quorumSize) decide('against')
      if (stats.votesFor.size + stats.votesAgainst.size === stats.membershipSize) {
        decide('against')
        allIn()
      }
    }
    for (const client of clients) {
      runScript(client, s, keys, args).then(
        (reply) => {
          if (reply === keys.length) {
            stats.votesFor.add(client)
          } else {
            const err = refusal(reply)
            refused++
            stats.votesAgainst.set(client, err)
            onError(err, true)
          }
          tally()
        },
        (err) => {
          const e = err instanceof Error ? err : new Error(`Unexpected type ${typeof err} thrown with value: ${err}`)
          stats.votesAgainst.set(client, e)
          onError(e, false)
          tally()
        },
      )
    }
  })
}

/** Lock validity as Redlock reckons it: end of a grant sent at `start`, less clock drift. */
function expirationOf(start, duration, driftFactor) {
  // 2 ms for Redis's 1 ms expiry precision, plus the allowed drift, as node-redlock has it.
  return start + duration - (Math.round(driftFactor * duration) + 2)
}

/** Resolves after `ms` (timers unref'd would end a process still waiting on a lock: not here). */
function delay(ms) {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)))
}

/**
 * Acquisitions of one Redlock pausing between attempts, by resource, oldest first, so that a
 * release through the same Redlock can wake one. Only the time of an attempt moves (the same
 * script, counted as any retry), so processes running node-redlock see the same commands; a
 * waiter in another process still waits out its pause.
 */
class Waiting {
  constructor() {
    this.queues = new Map()
  }

  /**
   * Resolves after `ms`, or sooner when wake() names one of `keys` and this is the oldest;
   * rejects with the reason of `signal` (optional) once it aborts.
   */
  pause(keys, ms, signal) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason)
      const waiter = { wake: null }
      const timer = setTimeout(() => waiter.wake(), ms)
      const leave = () => {
        clearTimeout(timer)
        signal?.removeEventListener('abort', onAbort)
        for (const k of keys) {
          const queue = this.queues.get(k)
          if (queue === undefined) continue
          queue.delete(waiter)
          if (queue.size === 0) this.queues.delete(k)
        }
      }
      const onAbort = () => {
        leave()
        reject(signal.reason)
      }
      signal?.addEventListener('abort', onAbort, { once: true })
      waiter.wake = () => {
        leave()
        resolve()
      }
      for (const k of keys) {
        let queue = this.queues.get(k)
        if (queue === undefined) this.queues.set(k, (queue = new Set()))
        queue.add(waiter)
      }
    })
  }

  /**
   * Called once a release of `resources` has been written: the acquisition that has paused
   * longest on each of them tries again now. It resumes before the releaser does, so its
   * attempt follows the release on every connection (Redis runs a connection's commands in
   * order; the face's writes of one tick leave together) and is granted in the release's round
   * trip instead of up to a retryDelay later, ahead of the releaser asking again. If the
   * release fails, that attempt was only an early retry. One waiter per resource, not all: the
   * others would only be refused.
   */
  wake(resources) {
    for (const r of resources) {
      const queue = this.queues.get(r)
      if (queue !== undefined) queue.values().next().value.wake()
    }
  }
}

/** A retry's pause: `retryDelay` ± up to `retryJitter`, never negative. */
function retryPause(retryDelay, retryJitter) {
  return Math.max(0, retryDelay + Math.floor((Math.random() * 2 - 1) * retryJitter))
}

module.exports = {
  ACQUIRE,
  EXTEND,
  RELEASE,
  script,
  customScript,
  randomValue,
  kindOf,
  runScript,
  batchWrites,
  quitClient,
  toClients,
  quorumOf,
  round,
  expirationOf,
  delay,
  Waiting,
  retryPause,
}
