'use strict'
// The table of a client's held locks (lib/held-locks.js), indexed by the slot of each lock's
// request id. Two held locks whose ids share a slot (the request table gave the slot to the
// second acquisition while the first lock was held) cannot be arranged through the public
// API on purpose, so this drives the table itself with ids the request table gave.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { Requests } = require('../lib/requests')
const { HeldLocks } = require('../lib/held-locks')

/** Two ids of one slot: the first request is answered (its slot freed), the second reuses it. */
function idsOfOneSlot() {
  const r = new Requests()
  const first = r.add('a')
  r.delete(first)
  const second = r.add('b')
  return [first, second]
}

test('a held lock is found by its id and gone once deleted', () => {
  const h = new HeldLocks()
  const r = new Requests()
  const id = r.add('x')
  h.set(id, 'lock')
  assert.equal(h.get(id), 'lock')
  assert.equal(h.size, 1)
  assert.equal(h.delete(id), true)
  assert.equal(h.get(id), undefined)
  assert.equal(h.delete(id), false)
  assert.equal(h.size, 0)
})

test('two held locks whose ids share a slot are both kept and told apart', () => {
  const [first, second] = idsOfOneSlot()
  const h = new HeldLocks()
  h.set(first, 'first')
  h.set(second, 'second')
  assert.equal(h.get(first), 'first')
  assert.equal(h.get(second), 'second')
  assert.equal(h.size, 2)
  assert.deepEqual(h.values().sort(), ['first', 'second'])
  assert.equal(h.delete(first), true)
  assert.equal(h.get(first), undefined)
  assert.equal(h.get(second), 'second', 'the one beside the slot is still found')
  assert.equal(h.delete(second), true)
  assert.equal(h.size, 0)
})

test('a lock set again under its id replaces itself, wherever it is kept', () => {
  const [first, second] = idsOfOneSlot()
  const h = new HeldLocks()
  h.set(first, 'first')
  h.set(second, 'second')
  h.delete(first)
  // The slot is free now, but `second` is kept beside it: setting it again must not make two.
  h.set(second, 'second again')
  assert.equal(h.size, 1)
  assert.equal(h.get(second), 'second again')
  assert.deepEqual(h.values(), ['second again'])
})

test('clear removes every lock', () => {
  const [first, second] = idsOfOneSlot()
  const h = new HeldLocks()
  h.set(first, 1)
  h.set(second, 2)
  h.clear()
  assert.equal(h.size, 0)
  assert.equal(h.get(first), undefined)
  assert.equal(h.get(second), undefined)
  assert.deepEqual(h.values(), [])
})
