'use strict'
// Read-write lock: actors take read or write holds of one lock; writers write to the register
// with their token. Checked: a believed write hold overlaps no other hold (read or write),
// no stale write accepted, tokens strictly increase.

async function round(ctx) {
  const { ttl, wait } = ctx.cfg.params
  const key = ctx.key('rw')
  const rw = ctx.client.readWriteLock(key)
  const write = ctx.rnd.chance(0.4)
  const autoExtend = ctx.rnd.chance(0.5)
  const holdMs = autoExtend ? ctx.rnd.int(50, ttl * 1.5) : ctx.rnd.int(30, ttl * 0.4)
  const f = write ? 'write' : 'read'
  const hold = await ctx.call(f, key, () => rw[f]({ ttl, wait, autoExtend }), (h) => ({ token: String(h.fencingToken) }))
  if (!hold) return ctx.sleep(ctx.rnd.int(5, 50))
  const g = ctx.granted(key, hold, { mode: write ? 'x' : 's' })
  hold.signal.addEventListener('abort', () => ctx.lost(g, key)(hold.signal.reason), { once: true })
  if (await ctx.hold(g, key, hold, holdMs, { token: write ? hold.fencingToken : null })) ctx.end(g, key, 'release')
  await ctx.call('release', key, () => hold.release(), (ok) => ({ released: ok }))
  await ctx.sleep(ctx.rnd.int(0, 30))
}

module.exports = { round, model: { kind: 'rw', register: true } }
