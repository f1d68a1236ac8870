'use strict'
// Every link in the README and the docs resolves: a relative link (or one to this repository's
// files on GitHub) names a file that exists, and its #anchor a heading of that file.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')

const ROOT = path.join(__dirname, '..')
const REPO = 'https://github.com/deadbolt-js/deadbolt/blob/main/'

/** The markdown files a reader is sent through: README, CONTRIBUTING, docs/ and the READMEs of the folders. */
function pages() {
  const out = ['README.md', 'CONTRIBUTING.md', 'CHANGELOG.md']
  const walk = (dir) => {
    for (const e of fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true })) {
      const rel = path.join(dir, e.name)
      if (e.isDirectory()) walk(rel)
      else if (e.name.endsWith('.md')) out.push(rel)
    }
  }
  walk('docs')
  for (const dir of ['bench', 'torture', 'jepsen', 'examples']) {
    if (fs.existsSync(path.join(ROOT, dir))) for (const f of fs.readdirSync(path.join(ROOT, dir))) if (f.endsWith('.md')) out.push(path.join(dir, f))
  }
  return out.filter((f) => fs.existsSync(path.join(ROOT, f)))
}

/** The text outside fenced code blocks. */
function prose(text) {
  return text.replace(/^```[\s\S]*?^```/gm, '')
}

/** GitHub's anchors for a file's headings (lower case, punctuation dropped, spaces → -, repeats numbered). */
function anchors(file) {
  const seen = new Map()
  const out = new Set()
  for (const m of prose(fs.readFileSync(file, 'utf8')).matchAll(/^#{1,6} (.+)$/gm)) {
    const text = m[1].replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    const base = text.trim().toLowerCase().replace(/[^\p{L}\p{N}\p{M}_\- ]/gu, '').replace(/ /g, '-')
    const n = seen.get(base) ?? 0
    seen.set(base, n + 1)
    out.add(n === 0 ? base : `${base}-${n}`)
  }
  return out
}

/** Every link of a page that points into this repository: { target file, anchor or null, as written }. */
function links(page) {
  const text = prose(fs.readFileSync(path.join(ROOT, page), 'utf8')).replace(/`[^`\n]*`/g, '')
  const out = []
  for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
    let href = m[1]
    if (href.startsWith(REPO)) href = path.relative(path.dirname(page), href.slice(REPO.length)) || path.basename(page)
    else if (/^[a-z][a-z+.-]*:/i.test(href)) continue
    const [file, anchor] = href.split('#')
    const target = file === '' ? page : path.normalize(path.join(path.dirname(page), file))
    out.push({ target, anchor: anchor ?? null, written: m[1] })
  }
  return out
}

for (const page of pages()) {
  test(`every link in ${page} resolves to a file and heading that exist`, () => {
    const broken = []
    for (const l of links(page)) {
      const abs = path.join(ROOT, l.target)
      if (!fs.existsSync(abs)) broken.push(`${l.written}: no file ${l.target}`)
      else if (l.anchor && fs.statSync(abs).isFile() && l.target.endsWith('.md') && !anchors(abs).has(decodeURIComponent(l.anchor))) {
        broken.push(`${l.written}: no heading #${l.anchor} in ${l.target}`)
      }
    }
    assert.deepEqual(broken, [])
  })
}
