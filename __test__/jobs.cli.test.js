'use strict'
// `deadbolt jobs`: the CLI's view of the job run records (lib/tools/cli-jobs.js), run as a user runs
// it (a child process), on a SQLite file: what it reads does not depend on the store.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { connect } = require('..')
const { prefix } = require('./helpers')

const BIN = path.join(__dirname, '..', 'bin', 'deadbolt.js')
const DIR = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-jobs-cli-'))
const URL = `sqlite://${path.join(DIR, 'locks.db')}`
after(() => fs.rmSync(DIR, { recursive: true, force: true }))

function cli(...args) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', timeout: 30_000, stdio: ['ignore', 'pipe', 'pipe'] })
  return { code: r.status, out: r.stdout.trim(), err: r.stderr.trim() }
}

test('deadbolt jobs prints the last run of each job, and --json gives it to scripts', async (t) => {
  const locks = await connect(URL, { name: 'cli-runner' })
  t.after(() => locks.close())
  const p = prefix('jobs')
  assert.equal(cli('jobs', URL, p).code, 1, 'exit 1 when no job has run')
  const { run } = await locks.runOnce(`${p}nightly`, () => {})
  const text = cli('jobs', URL, p)
  assert.equal(text.code, 0, text.err)
  assert.match(text.out, /^JOB +OUTCOME +STARTED +DURATION MS +RAN BY +TOKEN +NEXT DUE$/m)
  assert.match(text.out, new RegExp(`^${p}nightly +ran +\\S+ +\\d+ +cli-runner@${os.hostname().replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}/${process.pid} +${run.fencingToken}`, 'm'))
  const json = JSON.parse(cli('jobs', URL, p, '--json').out)
  assert.equal(json.length, 1)
  assert.equal(json[0].name, `${p}nightly`)
  assert.equal(json[0].outcome, 'ran')
  assert.equal(json[0].fencingToken, String(run.fencingToken))
  assert.deepEqual(json[0].holder, { host: os.hostname(), pid: process.pid, name: 'cli-runner' })
})

test('deadbolt jobs only looks: on a SQLite path with no file it finds nothing and creates none', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-jobs-cli-'))
  try {
    const r = cli('jobs', `sqlite://${path.join(dir, 'locks.db')}`, '--json')
    assert.deepEqual([r.code, JSON.parse(r.out)], [1, []])
    assert.deepEqual(fs.readdirSync(dir), [])
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('help jobs prints the command\'s help, the same as jobs --help', () => {
  const r = cli('help', 'jobs')
  assert.equal(r.code, 0, r.err)
  assert.match(r.out, /^Usage: deadbolt jobs <url> \[prefix\]/)
  assert.equal(r.out, cli('jobs', '--help').out)
})

test('deadbolt jobs shows a hostile job name escaped, in text and in --json', async (t) => {
  const locks = await connect(URL, { name: 'cli-runner' })
  t.after(() => locks.close())
  const p = prefix('jobs')
  await locks.runOnce(`${p}\x1b]0;pwned\x07\u202e`, () => {})
  const text = cli('jobs', URL, p)
  assert.equal(text.code, 0, text.err)
  const raw = (s) => ['\x1b', '\x07', '\u202e'].filter((c) => s.includes(c))
  assert.deepEqual(raw(text.out), [])
  assert.match(text.out, new RegExp(`${p}\\\\x1b\\]0;pwned\\\\x07\\\\u202e`))
  const json = cli('jobs', URL, p, '--json').out
  assert.deepEqual(raw(json), [])
  assert.equal(JSON.parse(json)[0].name, `${p}\x1b]0;pwned\x07\u202e`)
})
