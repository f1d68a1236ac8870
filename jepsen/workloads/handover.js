'use strict'
// Hand-over: an actor holds a key (autoExtend) and writes, stops extending it, and a second
// client of its own (a restarted process, say) adopts the lease by owner and goes on writing
// with the same token, then releases. Checked as the mutex: the adopted hold continues the
// first (same owner and token), and overlaps no other holder's.

async function round(ctx) {
  const { ttl, wait, keys } = ctx.cfg.params
  const key = ctx.key(`k${ctx.rnd.int(0, keys - 1)}`)
  ctx.second ??= await ctx.connect()
  const lock = await ctx.call('acquire', key, () => ctx.client.acquire(key, { ttl, wait, autoExtend: true }),
    (l) => ({ token: String(l.fencingToken) }))
  if (!lock) return ctx.sleep(ctx.rnd.int(5, 50))
  const g = ctx.granted(key, lock)
  lock.signal.addEventListener('abort', () => ctx.lost(g, key)(lock.signal.reason), { once: true })
  if (!(await ctx.hold(g, key, lock, ctx.rnd.int(30, 300), { token: lock.fencingToken }))) {
    await ctx.call('release', key, () => lock.release(), (ok) => ({ released: ok }))
    return
  }
  ctx.end(g, key, 'handover')
  await ctx.call('stopExtending', key, async () => lock.stopExtending())
  const adopted = await ctx.call('adopt', key, () => ctx.second.adopt(key, { owner: lock.owner, ttl, autoExtend: true }),
    (l) => ({ token: l === null ? null : String(l.fencingToken) }))
  if (!adopted) return
  const g2 = ctx.granted(key, adopted, { adoptOf: g })
  adopted.signal.addEventListener('abort', () => ctx.lost(g2, key)(adopted.signal.reason), { once: true })
  if (await ctx.hold(g2, key, adopted, ctx.rnd.int(30, 300), { token: adopted.fencingToken })) ctx.end(g2, key, 'release')
  await ctx.call('release', key, () => adopted.release(), (ok) => ({ released: ok }))
}

module.exports = { round, model: { kind: 'exclusive', register: true } }
