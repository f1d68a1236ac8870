'use strict'
// A map from ids to values that lets the values die young.
//
// The pending requests and the held locks churn at every operation: one entry in, one out. In
// a V8 `Map` that churn rehashes the table every few hundred operations, and an old table
// keeps its entries and a pointer to its successor. Once one table has been promoted to the
// old generation (any major GC while the process is busy does that), each later table, and
// every value any of them held, is reachable from a dead old table until the next major GC:
// scavenges promote all of them (nepotism). In a process with a heap of any size (ioredis
// loaded, or 100 000 objects of the application's) that made every scavenge promote ~3.7 MB
// and cost deadbolt ~1.5x its CPU per operation (bench/PROFILE.md). Here the `Map` holds only
// small integers (the value's slot in an array), so old tables keep nothing else alive.

class IdMap {
  constructor() {
    /** id → index in `slots` */
    this.slotOf = new Map()
    /** the values; `undefined` where a slot is free */
    this.slots = []
    /** free indices in `slots` */
    this.free = []
  }

  /** Number of entries. */
  get size() {
    return this.slotOf.size
  }

  /** The value of `id`, or undefined. */
  get(id) {
    const s = this.slotOf.get(id)
    return s === undefined ? undefined : this.slots[s]
  }

  /** Sets the value of `id` (never undefined). */
  set(id, value) {
    const s = this.slotOf.get(id)
    if (s !== undefined) {
      this.slots[s] = value
      return
    }
    const slot = this.free.length > 0 ? this.free.pop() : this.slots.length
    this.slots[slot] = value
    this.slotOf.set(id, slot)
  }

  /** Removes `id`; whether it was there. */
  delete(id) {
    const s = this.slotOf.get(id)
    if (s === undefined) return false
    this.slotOf.delete(id)
    this.slots[s] = undefined
    this.free.push(s)
    return true
  }

  /** The values, in the order their ids were first set. */
  values() {
    return Array.from(this.slotOf.values(), (s) => this.slots[s])
  }

  clear() {
    this.slotOf.clear()
    this.slots = []
    this.free = []
  }
}

module.exports = { IdMap }
