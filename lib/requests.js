'use strict'
// The requests a client has in flight, under ids that are their own index.
//
// Every operation registers its request, looks it up when the completion comes and removes
// it: three lookups per operation, six per acquire+release pair. In a `Map` (even one of
// small integers, lib/id-map.js) those cost ~190 ns per pair; here an id names its slot in an
// array, so a lookup is an index and a comparison (~35 ns).
//
// An id is `generation * SLOTS + slot`. A slot's generation grows each time the slot is
// reused, so an id is never given twice while the native side may still know the last one:
// a held lock keeps its acquisition's id long after the request left this table, and a
// later request in the same slot gets another id. A slot whose generation would pass
// MAX_GENERATION is retired (never reused), which keeps every id below 2^53 and unique for
// the life of the client. Values live in an array of reused slots, not in a hash table's
// entries, so nothing here keeps dead requests reachable from an old table (see id-map.js).

/** Slots an id can name. */
const SLOTS = 2 ** 24
/** Generations a slot goes through before it is retired: SLOTS * MAX_GENERATION < 2^53. */
const MAX_GENERATION = 2 ** 29 - 1

class Requests {
  constructor() {
    /** the id each slot holds now; 0 where it is free */
    this.ids = []
    /** each slot's request, or undefined */
    this.values = []
    /** each slot's last generation */
    this.generations = []
    /** free slots */
    this.free = []
    /** requests held */
    this.size = 0
  }

  /** Registers `value` (never undefined) and returns its new id. */
  add(value) {
    let slot
    if (this.free.length > 0) {
      slot = this.free.pop()
    } else {
      slot = this.ids.length
      if (slot >= SLOTS) {
        const err = new RangeError(`More than ${SLOTS} requests in flight on one client`)
        err.code = 'ERR_OUT_OF_RANGE'
        throw err
      }
      this.ids.push(0)
      this.values.push(undefined)
      this.generations.push(0)
    }
    const generation = this.generations[slot] + 1
    this.generations[slot] = generation
    const id = generation * SLOTS + slot
    this.ids[slot] = id
    this.values[slot] = value
    this.size++
    return id
  }

  /** The request of `id`, or undefined. */
  get(id) {
    const slot = slotOf(id)
    return this.ids[slot] === id ? this.values[slot] : undefined
  }

  /** Removes `id`; whether it was there. */
  delete(id) {
    const slot = slotOf(id)
    if (this.ids[slot] !== id) return false
    this.ids[slot] = 0
    this.values[slot] = undefined
    this.size--
    if (this.generations[slot] < MAX_GENERATION) this.free.push(slot)
    return true
  }

  /** The requests, in slot order. */
  list() {
    const out = []
    for (let s = 0; s < this.ids.length; s++) if (this.ids[s] !== 0) out.push(this.values[s])
    return out
  }

  /** Removes every request (their ids are never given again). */
  clear() {
    for (let s = 0; s < this.ids.length; s++) if (this.ids[s] !== 0) this.delete(this.ids[s])
  }
}

/** The slot id names (ids are above 2^31, so no bitwise operator takes them). */
function slotOf(id) {
  return id - Math.floor(id / SLOTS) * SLOTS
}

module.exports = { Requests, SLOTS, MAX_GENERATION, slotOf }
