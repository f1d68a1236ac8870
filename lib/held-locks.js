'use strict'
// The locks a client holds, by their acquisition's request id (lib/requests.js).
//
// A lock is entered at its grant and removed at its release or loss: one entry in and one
// out per acquire+release pair, as the request table's, so it is indexed the same way. A
// request id names a slot of the request table, and a held lock's id is kept here under that
// slot: a lookup is an index and a comparison, where the `Map` of lib/id-map.js cost a
// hash, a probe and, as the table grew and shrank around the number in flight, a rehash
// every few hundred operations (~800 instructions per pair, bench/PROFILE.md). The request
// table gives a slot to another request once the acquisition is answered, so a slot here may
// be wanted by a second held lock while the first is still held (a long hold while other
// requests come and go): that lock goes into an IdMap beside the slots.

const { slotOf } = require('./requests')
const { IdMap } = require('./id-map')

class HeldLocks {
  constructor() {
    /** the id held in each slot; 0 where none */
    this.ids = []
    /** each slot's lock, or undefined */
    this.locks = []
    /** locks whose slot was taken when they came */
    this.overflow = new IdMap()
    /** locks in the slots */
    this.inSlots = 0
  }

  /** Number of locks held. */
  get size() {
    return this.inSlots + this.overflow.size
  }

  /** The lock of `id`, or undefined. */
  get(id) {
    const s = slotOf(id)
    if (this.ids[s] === id) return this.locks[s]
    return this.overflow.size === 0 ? undefined : this.overflow.get(id)
  }

  /** Enters `lock` (never undefined) under `id`. */
  set(id, lock) {
    const s = slotOf(id)
    while (this.ids.length <= s) {
      this.ids.push(0)
      this.locks.push(undefined)
    }
    const there = this.ids[s]
    if (there === id) {
      this.locks[s] = lock
    } else if (there === 0 && !(this.overflow.size > 0 && this.overflow.get(id) !== undefined)) {
      this.ids[s] = id
      this.locks[s] = lock
      this.inSlots++
    } else {
      this.overflow.set(id, lock)
    }
  }

  /** Removes `id`; whether it was there. */
  delete(id) {
    const s = slotOf(id)
    if (this.ids[s] === id) {
      this.ids[s] = 0
      this.locks[s] = undefined
      this.inSlots--
      return true
    }
    return this.overflow.size > 0 && this.overflow.delete(id)
  }

  /** The locks held. */
  values() {
    const out = []
    for (let s = 0; s < this.ids.length; s++) if (this.ids[s] !== 0) out.push(this.locks[s])
    return out.concat(this.overflow.values())
  }

  /** Removes every lock. */
  clear() {
    this.ids = []
    this.locks = []
    this.overflow.clear()
    this.inSlots = 0
  }
}

module.exports = { HeldLocks }
