'use strict'
// Small helpers shared by the bench's scripts: statistics, formatting, timing, binaries and the
// order of interleaved rounds.

const fs = require('node:fs')
const path = require('node:path')

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/** Nearest-rank percentile of an ascending-sorted array (p in 0..100). */
function percentile(sorted, p) {
  if (sorted.length === 0) return NaN
  const rank = Math.ceil((p / 100) * sorted.length)
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]
}

function mean(xs) {
  if (xs.length === 0) return NaN
  let s = 0
  for (const x of xs) s += x
  return s / xs.length
}

function median(xs) {
  const v = xs.filter((x) => typeof x === 'number' && Number.isFinite(x)).sort((a, b) => a - b)
  if (v.length === 0) return NaN
  const m = v.length >> 1
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2
}

/** Formats a number with a sensible number of significant digits. */
function fmt(x, digits = 3) {
  if (x === null || x === undefined || Number.isNaN(x)) return '–'
  if (!Number.isFinite(x)) return String(x)
  const a = Math.abs(x)
  if (Number.isInteger(x) && a < 1000) return String(x)
  if (a >= 1000) return Math.round(x).toLocaleString('en-US')
  if (a === 0) return '0'
  const d = Math.max(0, digits - 1 - Math.floor(Math.log10(a)))
  return x.toFixed(Math.min(d, 3))
}

/** "median (min–max)" over runs; a single run prints just the value. */
function spread(xs, digits = 3) {
  const v = xs.filter((x) => typeof x === 'number' && Number.isFinite(x))
  if (v.length === 0) return '–'
  const m = median(v)
  if (v.length === 1) return fmt(m, digits)
  const lo = Math.min(...v)
  const hi = Math.max(...v)
  if (fmt(lo, digits) === fmt(hi, digits)) return fmt(m, digits)
  return `${fmt(m, digits)} (${fmt(lo, digits)}–${fmt(hi, digits)})`
}

/** Runs `n` async loops `fn(i)` concurrently and waits for all of them. */
async function parallel(n, fn) {
  const loops = []
  for (let i = 0; i < n; i++) loops.push(fn(i))
  return Promise.all(loops)
}

/** Rejects with `message` if `promise` has not settled within `ms`. */
function withTimeout(promise, ms, message) {
  let timer
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(message || `timed out after ${ms} ms`)), ms)
  })
  return Promise.race([promise, t]).finally(() => clearTimeout(timer))
}

function cpuMicros() {
  const u = process.cpuUsage()
  return u.user + u.system
}

/** The path of executable `bin` on PATH or in one of `extra`, or null. */
function which(bin, extra = []) {
  for (const dir of [...(process.env.PATH || '').split(':'), ...extra]) {
    const p = path.join(dir, bin)
    try {
      fs.accessSync(p, fs.constants.X_OK)
      return p
    } catch {}
  }
  return null
}

/**
 * `list` rotated left by `round` places: interleaved rounds take it in this order, so that no
 * entry always runs first (or right after another).
 */
function rotated(list, round) {
  const k = round % list.length
  return [...list.slice(k), ...list.slice(0, k)]
}

module.exports = { sleep, percentile, mean, median, fmt, spread, parallel, withTimeout, cpuMicros, which, rotated }
