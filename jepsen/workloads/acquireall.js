'use strict'
// acquireAll: each round takes two of three keys together (all or none), writes to each
// key's register with that key's token while the set is held, and releases them together.
// Checked as the mutex, per key.

async function round(ctx) {
  const { ttl, wait } = ctx.cfg.params
  const names = ['a', 'b', 'c']
  const skip = ctx.rnd.int(0, 2)
  const keys = names.filter((_, i) => i !== skip).map((n) => ctx.key(n))
  if (ctx.rnd.chance(0.5)) keys.reverse()
  const autoExtend = ctx.rnd.chance(0.5)
  const holdMs = autoExtend ? ctx.rnd.int(50, ttl * 1.5) : ctx.rnd.int(30, ttl * 0.4)
  const multi = await ctx.call('acquireAll', keys.join(','), () => ctx.client.acquireAll(keys, { ttl, wait, autoExtend }),
    (m) => ({ tokens: m.locks.map((l) => String(l.fencingToken)) }))
  if (!multi) return ctx.sleep(ctx.rnd.int(5, 50))
  const gs = multi.locks.map((l) => {
    const g = ctx.granted(l.key, l)
    l.signal.addEventListener('abort', () => ctx.lost(g, l.key)(l.signal.reason), { once: true })
    return g
  })
  const until = ctx.now() + holdMs
  let held = true
  while (held && ctx.now() < until) {
    for (let i = 0; i < gs.length && held; i++) {
      const l = multi.locks[i]
      if (!ctx.sample(gs[i], l.key, l)) { held = false; break }
      await ctx.write(gs[i], l.key, l.fencingToken, l)
    }
    await ctx.sleep(15 + ctx.rnd.int(0, 20))
  }
  gs.forEach((g, i) => ctx.end(g, multi.locks[i].key, held ? 'release' : 'held-false'))
  await ctx.call('release', keys.join(','), () => multi.release(), (ok) => ({ released: ok }))
  await ctx.sleep(ctx.rnd.int(0, 30))
}

module.exports = { round, model: { kind: 'exclusive', register: true } }
