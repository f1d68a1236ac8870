'use strict'
// PgBouncer in front of PostgreSQL: a pooler that hands one server session to several clients
// (pool_mode = transaction) breaks what the PostgreSQL store needs (statement_timeout in the
// startup packet, prepared statements, a LISTENing session), so it is refused at connect with
// cause code ERR_LOCK_STORE_UNSUPPORTED, whether PgBouncer refuses the `options` startup
// parameter (its default) or drops it (ignore_startup_parameters). Each test starts its own
// PgBouncer (Debian's `pgbouncer`) in front of the shared server, and stops it.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { connect, LockBackendError } = require('..')
const { PG_URL, needPg, prefix } = require('./helpers')
const { startPgbouncer, needPgbouncer } = require('./fixtures/pgbouncer')

const need = async (t) => (await needPg(t)) && needPgbouncer(t)

/** The rejection of `promise`, failing if it resolves. */
const rejection = (promise) => promise.then((v) => assert.fail(`resolved with ${v}`), (e) => e)

test('connecting through PgBouncer in transaction mode fails with ERR_LOCK_STORE_UNSUPPORTED', async (t) => {
  if (!(await need(t))) return
  const bouncer = await startPgbouncer({ pool_mode: 'transaction' })
  try {
    const err = await rejection(connect(bouncer.url, { connectTimeout: 3_000 }))
    assert.ok(err instanceof LockBackendError, err.stack)
    assert.equal(err.cause.code, 'ERR_LOCK_STORE_UNSUPPORTED', err.cause.message)
    assert.match(err.cause.message, new RegExp(`127\\.0\\.0\\.1:${bouncer.port}`))
  } finally {
    await bouncer.stop()
  }
})

test('connecting through PgBouncer that ignores the options startup parameter fails with ERR_LOCK_STORE_UNSUPPORTED', async (t) => {
  if (!(await need(t))) return
  const bouncer = await startPgbouncer({ pool_mode: 'transaction', ignore_startup_parameters: 'extra_float_digits, options' })
  try {
    const err = await rejection(connect(bouncer.url, { connectTimeout: 3_000 }))
    assert.ok(err instanceof LockBackendError, err.stack)
    assert.equal(err.cause.code, 'ERR_LOCK_STORE_UNSUPPORTED', err.cause.message)
  } finally {
    await bouncer.stop()
  }
})

test('two lazy clients contending through PgBouncer in transaction mode are both refused and take nothing', async (t) => {
  if (!(await need(t))) return
  const bouncer = await startPgbouncer({ pool_mode: 'transaction', ignore_startup_parameters: 'extra_float_digits, options' })
  const table = `bouncer_${prefix('t').split(':')[2]}`
  const a = await connect(bouncer.url, { lazy: true, table, connectTimeout: 3_000 })
  const b = await connect(bouncer.url, { lazy: true, table, connectTimeout: 3_000 })
  const direct = await connect(PG_URL, { lazy: true, table })
  try {
    const key = prefix('pgbouncer') + 'k'
    const errors = await Promise.all([a, b].map((locks) => rejection(locks.tryAcquire(key, { ttl: 10_000 }))))
    for (const err of errors) assert.equal(err.cause?.code, 'ERR_LOCK_STORE_UNSUPPORTED', err.stack)
    // Refused before any statement: the table was not even created, so nothing is held.
    assert.equal(await direct.inspect(key), null)
  } finally {
    await Promise.all([a.close(), b.close(), direct.close()])
    await bouncer.stop()
  }
})

test('connecting through PgBouncer to a database it does not serve still reports that, not UNSUPPORTED', async (t) => {
  if (!(await need(t))) return
  const bouncer = await startPgbouncer({ pool_mode: 'transaction' })
  try {
    const err = await rejection(connect(bouncer.url.replace(/\/test$/, '/nosuchdb'), { connectTimeout: 3_000 }))
    assert.ok(err instanceof LockBackendError, err.stack)
    assert.notEqual(err.cause.code, 'ERR_LOCK_STORE_UNSUPPORTED', err.cause.message)
  } finally {
    await bouncer.stop()
  }
})
