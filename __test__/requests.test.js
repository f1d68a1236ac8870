'use strict'
// The table of a client's requests in flight (lib/requests.js), whose ids index it. Its one
// safety property, that an id is never given twice, cannot be reached through the public
// API in a test's time (a slot must be reused 2^29 times), so this drives the table itself.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { Requests, SLOTS, MAX_GENERATION } = require('../lib/requests')

test('a reused slot gets a new id, and the old id finds nothing', () => {
  const r = new Requests()
  const first = r.add('first')
  assert.equal(r.delete(first), true)
  const second = r.add('second')
  assert.notEqual(second, first)
  assert.equal(second % SLOTS, first % SLOTS, 'the slot is reused')
  assert.equal(r.get(first), undefined)
  assert.equal(r.delete(first), false)
  assert.equal(r.get(second), 'second')
  assert.equal(r.size, 1)
})

test('a slot whose generations are spent is retired, so no id is given twice', () => {
  const r = new Requests()
  const id = r.add('a')
  const slot = id % SLOTS
  r.generations[slot] = MAX_GENERATION - 1
  r.delete(id)
  const last = r.add('b')
  assert.equal(last % SLOTS, slot)
  assert.equal(last, MAX_GENERATION * SLOTS + slot)
  assert.ok(Number.isSafeInteger(last))
  r.delete(last)
  const next = r.add('c')
  assert.notEqual(next % SLOTS, slot, 'the spent slot is not reused')
  assert.equal(r.get(last), undefined)
})

test('the largest id a table can give is an exact integer', () => {
  assert.ok(Number.isSafeInteger(MAX_GENERATION * SLOTS + SLOTS - 1))
  assert.ok(!Number.isSafeInteger((MAX_GENERATION + 1) * SLOTS + SLOTS - 1))
})

test('ids that were never given, or are not integers, find nothing', () => {
  const r = new Requests()
  const id = r.add('a')
  for (const other of [0, -1, 1, id + SLOTS, id - SLOTS, id + 0.5, NaN, 2 ** 60]) {
    assert.equal(r.get(other), undefined, String(other))
    assert.equal(r.delete(other), false, String(other))
  }
  assert.equal(r.get(id), 'a')
})

test('list and clear see every request, and cleared ids are never given again', () => {
  const r = new Requests()
  const ids = ['a', 'b', 'c'].map((v) => r.add(v))
  r.delete(ids[1])
  assert.deepEqual(r.list(), ['a', 'c'])
  r.clear()
  assert.equal(r.size, 0)
  assert.deepEqual(r.list(), [])
  const again = Array.from({ length: 4 }, (_, i) => r.add(i))
  for (const id of again) assert.ok(!ids.includes(id), `${id} was given before`)
  assert.equal(new Set(again).size, again.length)
})
