'use strict'
// Election: every actor campaigns for one name for a while, then resigns. A leader writes to
// the register with its term while `isLeader` and its lock is held. Checked: never two
// believed leaders at once (so never two acting in one term), a term never granted twice,
// no write of a deposed leader accepted after a later term's.

async function round(ctx) {
  const { ttl } = ctx.cfg.params
  const key = ctx.key('leader')
  let g = null
  let lock = null
  let acting = null
  const election = ctx.client.elect(key, {
    ttl,
    onElected: (l) => {
      lock = l
      const mine = ctx.granted(key, l, { term: String(l.fencingToken) })
      g = mine
      const view = { get held() { return election.isLeader && lock === l && l.held }, get validUntil() { return l.validUntil } }
      acting = (async () => {
        while (g === mine && !ctx.stopped()) {
          if (!ctx.sample(mine, key, view)) { ctx.end(mine, key, 'held-false'); return }
          await ctx.write(mine, key, l.fencingToken, view)
          await ctx.sleep(15 + ctx.rnd.int(0, 20))
        }
      })()
    },
    onRevoked: (err) => { if (g) ctx.lost(g, key)(err) },
  })
  await ctx.call('elect', key, async () => true)
  const until = ctx.now() + ctx.rnd.int(300, 2000)
  while (ctx.now() < until && !ctx.stopped()) await ctx.sleep(20)
  const last = g
  if (last) ctx.end(last, key, 'release')
  g = null
  await acting
  await ctx.call('resign', key, () => election.resign())
  await ctx.sleep(ctx.rnd.int(0, 50))
}

module.exports = { round, model: { kind: 'exclusive', register: true } }
