'use strict'
// The harness's one source of randomness: a small seeded generator (sfc32 seeded through
// splitmix32), so the same seed gives the same schedule on every machine and Node version.

function splitmix32(a) {
  return () => {
    a = (a + 0x9e3779b9) | 0
    let z = a
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b)
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35)
    return (z ^ (z >>> 16)) >>> 0
  }
}

/** A generator seeded with the integer `seed`: `next()` in [0, 1), and helpers on it. */
function prng(seed) {
  const mix = splitmix32(Number(BigInt.asUintN(32, BigInt(seed))))
  let a = mix()
  let b = mix()
  let c = mix()
  let d = mix()
  const next = () => {
    a >>>= 0; b >>>= 0; c >>>= 0; d >>>= 0
    const t = (a + b) | 0
    a = b ^ (b >>> 9)
    b = (c + (c << 3)) | 0
    c = (c << 21) | (c >>> 11)
    d = (d + 1) | 0
    const r = (t + d) | 0
    c = (c + r) | 0
    return (r >>> 0) / 4294967296
  }
  // sfc32's first outputs of nearby seeds are alike: discard them.
  for (let i = 0; i < 16; i++) next()
  const r = {
    next,
    /** An integer in [lo, hi]. */
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
    /** One element of `xs`. */
    pick: (xs) => xs[Math.floor(next() * xs.length)],
    /** True with probability `p`. */
    chance: (p) => next() < p,
    /** A 31-bit seed for a sub-generator. */
    seed: () => Math.floor(next() * 0x7fffffff),
  }
  return r
}

module.exports = { prng }
