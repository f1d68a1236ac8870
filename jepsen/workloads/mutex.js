'use strict'
// Mutex over a fenced register: acquire a key, write to the register with the fencing token
// while `held`, release. Half the rounds keep the lease with autoExtend and may hold past the
// ttl; the others hold less than it. Checked: no two believed holds of a key overlap, no
// stale write accepted, tokens strictly increase per key.

async function round(ctx) {
  const { ttl, wait, keys } = ctx.cfg.params
  const key = ctx.key(`k${ctx.rnd.int(0, keys - 1)}`)
  const autoExtend = ctx.rnd.chance(0.5)
  const holdMs = autoExtend ? ctx.rnd.int(50, ttl * 1.5) : ctx.rnd.int(30, ttl * 0.4)
  const lock = await ctx.call('acquire', key, () => ctx.client.acquire(key, { ttl, wait, autoExtend }),
    (l) => ({ token: String(l.fencingToken) }))
  if (!lock) return ctx.sleep(ctx.rnd.int(5, 50))
  const g = ctx.granted(key, lock)
  lock.signal.addEventListener('abort', () => ctx.lost(g, key)(lock.signal.reason), { once: true })
  if (lock.signal.aborted) ctx.lost(g, key)(lock.signal.reason)
  if (await ctx.hold(g, key, lock, holdMs, { token: lock.fencingToken })) ctx.end(g, key, 'release')
  await ctx.call('release', key, () => lock.release(), (ok) => ({ released: ok }))
  await ctx.sleep(ctx.rnd.int(0, 30))
}

module.exports = { round, model: { kind: 'exclusive', register: true } }
