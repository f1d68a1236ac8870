'use strict'
// Web Locks `request`: exclusive and shared requests on one name; the callback holds the lock
// until its promise settles, writing (exclusive) with the lock's token while its signal is not
// aborted and `held` is true (deadbolt's WebLock reads its lease's local deadline, as a Lock
// does: a holder paused past its lease cannot have been told of the loss, but reads `held`
// false when it resumes). Checked as the read-write lock.

async function round(ctx) {
  const name = ctx.key('web')
  const exclusive = ctx.rnd.chance(0.5)
  const holdMs = ctx.rnd.int(30, ctx.cfg.params.ttl)
  await ctx.call('request', name, () => ctx.client.request(name, { mode: exclusive ? 'exclusive' : 'shared' }, async (lock) => {
    const g = ctx.granted(name, { fencingToken: lock.fencingToken, owner: null, held: lock.held && !lock.signal.aborted, validUntil: lock.validUntil }, { mode: exclusive ? 'x' : 's' })
    lock.signal.addEventListener('abort', () => ctx.lost(g, name)(lock.signal.reason), { once: true })
    const view = { get held() { return lock.held && !lock.signal.aborted }, get validUntil() { return lock.validUntil } }
    if (await ctx.hold(g, name, view, holdMs, { token: exclusive ? lock.fencingToken : null })) ctx.end(g, name, 'release')
    return true
  }))
  await ctx.sleep(ctx.rnd.int(0, 30))
}

module.exports = { round, model: { kind: 'rw', register: true } }
