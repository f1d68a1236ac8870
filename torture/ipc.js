'use strict'
// A worker process's side of the orchestrator's IPC (torture/harness.js's WorkerHandle), for
// the torture and the jepsen workers alike: commands in, replies out, and writes offered to
// the protected resource, which the orchestrator accepts or refuses.

let writeSeq = 0
const pendingWrites = new Map()

/**
 * Offers a write to the protected resource and resolves with whether it was accepted. It is
 * logged first through `log` as `{ ev: 'write', key, token, held, wid, ...fields }`; `sent`
 * fields also go to the orchestrator (jepsen's actor, `a`).
 */
function offerWrite(log, { key, token, held }, fields, sent = {}) {
  const wid = ++writeSeq
  log({ ...sent, ev: 'write', key, token: String(token), held, ...fields, wid })
  return new Promise((resolve) => {
    pendingWrites.set(wid, resolve)
    process.send({ type: 'write', wid, key, token: String(token), held, ...sent })
  })
}

/**
 * Runs `commands[name](args)` for every command the orchestrator sends and replies with its
 * value, or its error's code, name and message; the worker exits when the orchestrator goes.
 */
function serveCommands(commands) {
  process.on('message', async (m) => {
    if (m.type === 'write-result') {
      const resolve = pendingWrites.get(m.wid)
      pendingWrites.delete(m.wid)
      if (resolve) resolve(m.accepted)
      return
    }
    if (m.type !== 'cmd') return
    try {
      const value = await commands[m.cmd](m.args ?? {})
      process.send({ type: 'reply', id: m.id, ok: true, value })
    } catch (err) {
      process.send({ type: 'reply', id: m.id, ok: false, error: { code: err.code ?? null, name: err.name, message: String(err.message) } })
    }
  })
  process.on('disconnect', () => process.exit(0))
}

module.exports = { offerWrite, serveCommands }
