'use strict'
// Semaphore: permits of one semaphore (limit 2) taken and held by more actors than the
// limit. Checked: never more believed holders at once than the limit, tokens never repeat.

async function round(ctx) {
  const { ttl, wait, limit } = ctx.cfg.params
  const key = ctx.key('sem')
  const sem = ctx.client.semaphore(key, { limit })
  const autoExtend = ctx.rnd.chance(0.5)
  const holdMs = autoExtend ? ctx.rnd.int(50, ttl * 1.5) : ctx.rnd.int(30, ttl * 0.4)
  const permit = await ctx.call('acquire', key, () => sem.acquire({ ttl, wait, autoExtend }),
    (p) => ({ token: String(p.fencingToken) }))
  if (!permit) return ctx.sleep(ctx.rnd.int(5, 50))
  const g = ctx.granted(key, permit, { mode: 'p' })
  permit.signal.addEventListener('abort', () => ctx.lost(g, key)(permit.signal.reason), { once: true })
  if (await ctx.hold(g, key, permit, holdMs)) ctx.end(g, key, 'release')
  await ctx.call('release', key, () => permit.release(), (ok) => ({ released: ok }))
  await ctx.sleep(ctx.rnd.int(0, 30))
}

module.exports = { round, model: { kind: 'semaphore', register: false } }
