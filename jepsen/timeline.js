'use strict'
// A failure's picture: a self-contained SVG, one row per actor, a bar per believed hold
// (coloured by key, the token written on it), a tick at each grant, faults as shaded spans
// (on the row of the worker they hit, or across every row for the store and the network),
// and the violations listed underneath. Written next to the JSON history.

const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c])
const COLORS = ['#4e79a7', '#f28e2b', '#59a14f', '#b07aa1', '#76b7b2', '#edc948', '#ff9da7', '#9c755f']

function timeline(r, title) {
  const holds = r.holds
  const t0 = r.start
  const tEnd = Math.max(t0 + 1, ...holds.map((h) => h.end), ...r.faults.map((f) => f.end ?? f.t), ...r.events.map((e) => e.t))
  const actors = [...new Set(r.events.filter((e) => e.a).map((e) => e.a))].sort()
  const workerOf = new Map(r.events.filter((e) => e.a).map((e) => [e.a, e.w]))
  const keys = [...new Set(holds.map((h) => h.key))]
  const W = 1200
  const L = 90
  const ROW = 26
  const top = 40
  const x = (t) => L + ((t - t0) / (tEnd - t0)) * (W - L - 10)
  const y = (i) => top + i * ROW
  const H = top + actors.length * ROW + 54 + 16 * (r.violations.length + r.faults.length + 2)
  const out = [`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="monospace" font-size="11">`]
  out.push(`<text x="4" y="16" font-size="13">${esc(title)}</text>`)
  for (let s = 0; s <= (tEnd - t0) / 1000; s++) {
    out.push(`<line x1="${x(t0 + s * 1000)}" y1="${top - 8}" x2="${x(t0 + s * 1000)}" y2="${y(actors.length)}" stroke="#ddd"/><text x="${x(t0 + s * 1000) + 2}" y="${top - 10}" fill="#888">${s}s</text>`)
  }
  r.faults.forEach((f, n) => {
    const rows = f.worker ? actors.map((a, i) => [a, i]).filter(([a]) => workerOf.get(a) === f.worker) : actors.map((a, i) => [a, i])
    for (const [, i] of rows) {
      out.push(`<rect x="${x(f.t)}" y="${y(i) - 2}" width="${Math.max(2, x(f.end ?? f.t) - x(f.t))}" height="${ROW - 2}" fill="#e15759" fill-opacity="0.18"><title>${esc(`${f.kind} ${f.worker ?? f.server ?? f.workers ?? ''}`)}</title></rect>`)
    }
    out.push(`<text x="${x(f.t)}" y="${y(actors.length) + 12 + 12 * (n % 3)}" fill="#e15759">${esc(f.kind)}</text>`)
  })
  const blamed = new Set(r.violations.flatMap((v) => v.match(/\ba[0-9.]+#\d+/g) ?? []))
  actors.forEach((a, i) => {
    out.push(`<text x="4" y="${y(i) + 14}">${esc(`${a} (${workerOf.get(a)})`)}</text>`)
    for (const h of holds.filter((q) => q.a === a)) {
      const c = COLORS[keys.indexOf(h.key) % COLORS.length]
      const w = Math.max(1, x(h.end) - x(h.start))
      out.push(`<rect x="${x(h.start)}" y="${y(i) + 3}" width="${w}" height="${ROW - 10}" fill="${c}" fill-opacity="${h.mode === 's' ? 0.45 : 0.85}"${blamed.has(h.g) ? ' stroke="#c00" stroke-width="2"' : ''}><title>${esc(`${h.g} ${h.key} token ${h.token} ${h.mode} ${h.why ?? (h.lostT ? 'lost' : '')}`)}</title></rect>`)
      out.push(`<line x1="${x(h.start)}" y1="${y(i)}" x2="${x(h.start)}" y2="${y(i) + ROW - 4}" stroke="#000"/>`)
      if (w > 24) out.push(`<text x="${x(h.start) + 3}" y="${y(i) + 14}" fill="#fff">${esc(h.token)}</text>`)
      if (h.lostT !== null) out.push(`<circle cx="${x(h.lostT)}" cy="${y(i) + ROW / 2}" r="3" fill="#e15759"><title>loss notice</title></circle>`)
    }
  })
  let ly = y(actors.length) + 58
  out.push(`<text x="4" y="${ly}">keys: ${keys.map((k, i) => `<tspan fill="${COLORS[i % COLORS.length]}">■ ${esc(k)}</tspan>`).join('  ')}</text>`)
  for (const v of r.violations) { ly += 16; out.push(`<text x="4" y="${ly}" fill="#c00">✗ ${esc(v.slice(0, 190))}</text>`) }
  for (const f of r.faults) { ly += 16; out.push(`<text x="4" y="${ly}" fill="#888">${esc(`${((f.t - t0) / 1000).toFixed(2)}s–${(((f.end ?? f.t) - t0) / 1000).toFixed(2)}s ${f.kind} ${f.worker ?? f.server ?? f.workers ?? ''}`)}</text>`) }
  out.push('</svg>')
  return out.join('\n')
}

module.exports = { timeline }
