'use strict'
// The orchestrator's side of a scenario: worker processes (forked, IPC for commands and the
// resource, stdout for their JSON event lines), the merged event log, the fault log and the
// protected resource. Everything a scenario starts is registered here and stopped by
// `dispose`, whatever happened.

const { fork } = require('node:child_process')
const path = require('node:path')
const readline = require('node:readline')
const { Resource } = require('./resource')
const { stopProcess } = require('./servers')

const now = () => Number(process.hrtime.bigint()) / 1e6
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

class WorkerHandle {
  /** `script`: the worker body to fork (this suite's worker.js unless another harness says). */
  constructor(h, id, script = path.join(__dirname, 'worker.js')) {
    this.h = h
    this.id = id
    this.seq = 0
    this.replies = new Map()
    this.proc = fork(script, [], {
      env: { ...process.env, TORTURE_WORKER: id },
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    })
    this.pid = this.proc.pid
    this.stderr = ''
    this.proc.stderr.on('data', (d) => { if (this.stderr.length < 20000) this.stderr += d })
    this.alive = true
    this.exited = new Promise((resolve) => this.proc.once('exit', (code, signal) => {
      this.alive = false
      for (const r of this.replies.values()) r.reject(new Error(`worker ${id} exited (${code ?? signal})`))
      this.replies.clear()
      resolve({ code, signal })
    }))
    readline.createInterface({ input: this.proc.stdout }).on('line', (line) => {
      try { h.record(JSON.parse(line)) } catch { /* not an event */ }
    })
    this.proc.on('message', (m) => {
      if (m.type === 'write') {
        const accepted = h.resource.offer(id, m)
        if (this.proc.connected) this.proc.send({ type: 'write-result', wid: m.wid, accepted }, () => {})
      } else if (m.type === 'reply') {
        const r = this.replies.get(m.id)
        this.replies.delete(m.id)
        if (!r) return
        if (m.ok) r.resolve(m.value)
        else r.reject(Object.assign(new Error(m.error.message), { code: m.error.code }))
      }
    })
    this.proc.on('error', () => {})
    this.ready = h.waitFor((e) => e.w === id && e.ev === 'ready', 30000, `worker ${id} ready`)
  }

  /** Sends a command; rejects if no reply within `timeout` ms or the worker dies. */
  cmd(cmd, args = {}, { timeout = 60000 } = {}) {
    if (!this.alive) return Promise.reject(new Error(`worker ${this.id} is dead`))
    const id = ++this.seq
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => { this.replies.delete(id); reject(new Error(`worker ${this.id}: ${cmd} got no reply within ${timeout} ms`)) }, timeout)
      this.replies.set(id, { resolve: (v) => { clearTimeout(timer); resolve(v) }, reject: (e) => { clearTimeout(timer); reject(e) } })
      this.proc.send({ type: 'cmd', id, cmd, args }, () => {})
    })
  }

  /** SIGSTOPs the worker and resolves once all its threads are stopped. */
  async pause() {
    if (this.alive) await stopProcess(this.pid).catch(() => {})
  }

  signal(sig) {
    if (this.alive) { try { this.proc.kill(sig) } catch {} }
  }

  async kill() {
    if (!this.alive) return
    this.signal('SIGCONT')
    this.signal('SIGKILL')
    await this.exited
  }
}

class Harness {
  constructor({ store, prefix, short }) {
    this.store = store
    this.prefix = prefix
    this.short = short
    this.events = []
    this.faults = []
    this.resource = new Resource(now)
    this.workers = []
    this.waiters = new Set()
    this.cleanups = []
    this.notes = []
    this.figures = {} // scenario-specific: takeoverMs, lateness…
    this.violations = []
    this.names = new Set()
    this.baseOpts = {} // connect options every worker client gets (an isolated table)
    this.epochs = []
  }

  now() { return now() }

  record(e) {
    this.events.push(e)
    for (const w of this.waiters) {
      if (w.pred(e)) { this.waiters.delete(w); w.resolve(e) }
    }
  }

  /** Resolves with the first event (already logged or to come) that matches `pred`. */
  waitFor(pred, ms, what = 'event') {
    const found = this.events.find(pred)
    if (found) return Promise.resolve(found)
    return new Promise((resolve, reject) => {
      const w = { pred, resolve: (e) => { clearTimeout(timer); resolve(e) } }
      const timer = setTimeout(() => { this.waiters.delete(w); reject(new Error(`timed out after ${ms} ms waiting for ${what}`)) }, ms)
      this.waiters.add(w)
    })
  }

  /** Like waitFor, but resolves null instead of rejecting on timeout. */
  maybe(pred, ms) {
    return this.waitFor(pred, ms).catch(() => null)
  }

  async worker(id) {
    const w = new WorkerHandle(this, id)
    this.workers.push(w)
    await w.ready
    return w
  }

  fault(kind, extra = {}) {
    const f = { kind, t: now(), ...extra }
    this.faults.push(f)
    return f
  }

  /** A key under the run's random prefix (remembered: its counter is within the budget). */
  key(name) {
    const k = `${this.prefix}${name}`
    this.names.add(k)
    return k
  }

  onDispose(fn) { this.cleanups.push(fn) }

  violate(msg) { this.violations.push(msg) }

  check(cond, msg) { if (!cond) this.violate(msg) }

  note(msg) { this.notes.push(msg) }

  /** Stops every worker (politely, then SIGKILL). */
  async stopWorkers() {
    await Promise.all(this.workers.map(async (w) => {
      if (!w.alive) return
      w.signal('SIGCONT')
      await Promise.race([w.cmd('exit', {}, { timeout: 3000 }).catch(() => {}), w.exited, sleep(3000)])
      await Promise.race([w.exited, sleep(2000)])
      await w.kill()
    }))
  }

  /** Runs the registered cleanups, last registered first. */
  async runCleanups() {
    for (const fn of this.cleanups.reverse()) await Promise.resolve().then(fn).catch(() => {})
    this.cleanups = []
  }
}

module.exports = { Harness, WorkerHandle, now, sleep }
