'use strict'
// The registry of stores (src/store/registry.rs) is the one list of stores: the client's URL
// check, its message, its options, the diagnostics' store names, the CLI's help, the types and
// the docs follow it, and these tests fail when one of them drifts. connect() parses its
// target once and every part of the client reads that one result.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { connect } = require('..')
const { stores } = require('../lib/addon')
const cli = require('../lib/tools/cli')

const STORES = stores()

test('the registry names every store once with its schemes', () => {
  const names = STORES.map((e) => e.name)
  assert.deepEqual(names, ['redis', 'mysql', 'postgres', 'sqlite', 'dynamodb', 'etcd', 'memory'])
  const schemes = STORES.flatMap((e) => e.schemes)
  assert.equal(new Set(schemes).size, schemes.length)
})

test('a URL whose scheme is not in the registry is refused before any I/O, naming every scheme', async () => {
  const err = await connect('http://127.0.0.1:1').then(() => null, (e) => e)
  assert.ok(err instanceof TypeError)
  assert.equal(err.code, 'ERR_INVALID_ARG_VALUE')
  for (const s of STORES.flatMap((e) => e.schemes)) assert.ok(err.message.includes(`${s}://`), s)
})

test('a URL of every scheme in the registry passes the scheme check, in any case', async (t) => {
  // lazy: nothing is opened, so only the scheme check and the store's own URL parsing run.
  const urls = {
    redis: 'redis://127.0.0.1:1', rediss: 'rediss://127.0.0.1:1', 'redis+unix': 'redis+unix:///tmp/x.sock', unix: 'unix:///tmp/x.sock',
    mysql: 'mysql://root@127.0.0.1:1/test', mariadb: 'MariaDB://root@127.0.0.1:1/test',
    postgres: 'postgres://u@127.0.0.1:1/test', postgresql: 'POSTGRESQL://u@127.0.0.1:1/test',
    sqlite: `sqlite://${path.join(require('node:os').tmpdir(), `deadbolt-registry-${process.pid}.db`)}`,
    dynamodb: 'dynamodb://locks?region=us-east-1&endpoint=http://127.0.0.1:1',
    etcd: 'etcd://127.0.0.1:1,127.0.0.1:2', etcds: 'ETCDS://u:p@127.0.0.1:1',
    memory: 'memory://registry-test',
  }
  for (const s of STORES.flatMap((e) => e.schemes)) {
    assert.ok(urls[s], `a test URL for ${s}://`)
    const client = await connect(urls[s], { lazy: true, ...(s === 'dynamodb' ? { credentials: { accessKeyId: 'AKIDREGISTRYTEST', secretAccessKey: 'registry-test-secret' } } : {}) })
    await client.close()
  }
  t.after(() => fs.rmSync(urls.sqlite, { force: true }))
})

test("the CLI's help shows every store of the registry", async () => {
  const lines = []
  await cli.main(['--help'], { out: (l) => lines.push(l), err: (l) => lines.push(l), env: {} })
  const help = lines.join('\n')
  for (const e of STORES) assert.ok(help.includes(e.example), e.example)
})

/** The text of a file of the package. */
function read(file) {
  return fs.readFileSync(path.join(__dirname, '..', file), 'utf8')
}

test("the CLI's help names every store whose registry entry takes --table", async () => {
  const lines = []
  await cli.main(['--help'], { out: (l) => lines.push(l), err: (l) => lines.push(l), env: {} })
  const help = lines.join('\n')
  const table = help.slice(help.indexOf('--table NAME'), help.indexOf(': the lock table'))
  for (const e of STORES.filter((e) => e.options.includes('table'))) assert.ok(table.includes(e.name), e.name)
})

for (const [file, heading] of [['README.md', '## Stores'], ['docs/stores/README.md', '## Backends']]) {
  test(`the stores table of ${file} has a row for every scheme of the registry`, () => {
    const text = read(file)
    const start = text.indexOf(heading)
    assert.ok(start >= 0, `${file} has a ${heading} section`)
    const end = text.indexOf('\n## ', start + 3)
    const table = text.slice(start, end < 0 ? undefined : end)
    for (const s of STORES.flatMap((e) => e.schemes).filter((s) => s !== 'unix')) {
      assert.ok(table.includes(`\`${s}://`), `${s}:// in the stores table of ${file}`)
    }
  })
}

for (const [file, heading] of [['README.md', '## Stores'], ['docs/stores/README.md', '## Backends']]) {
  test(`the stores table of ${file} names no scheme the registry lacks`, () => {
    const text = read(file)
    const start = text.indexOf(heading)
    const end = text.indexOf('\n## ', start + 3)
    const urls = text.slice(start, end < 0 ? undefined : end).split('\n').filter((l) => l.startsWith('| `')).map((l) => l.split('|')[1])
    const schemes = new Set(STORES.flatMap((e) => e.schemes))
    for (const [, s] of urls.join(' ').matchAll(/`([a-z][a-z0-9+.-]*):\/\//g)) assert.ok(schemes.has(s), `${s}:// of ${file} is in the registry`)
  })
}

/** The members of the string-literal union type `name` in index.d.ts. */
function unionOf(name) {
  const decl = new RegExp(`export type ${name} = ([^\\n]*)`).exec(read('index.d.ts'))
  assert.ok(decl, `index.d.ts declares ${name}`)
  return [...decl[1].matchAll(/'([^']*)'/g)].map((m) => m[1])
}

test("StoreName in index.d.ts is the registry's store names and redlock", () => {
  assert.deepEqual(unionOf('StoreName').sort(), [...STORES.map((e) => e.name), 'redlock'].sort())
})

test("connect()'s documentation in index.d.ts names every scheme of the registry", () => {
  const types = read('index.d.ts')
  const doc = types.slice(types.lastIndexOf('/**', types.indexOf('export declare function connect(')), types.indexOf('export declare function connect('))
  for (const s of STORES.flatMap((e) => e.schemes).filter((s) => s !== 'unix')) assert.ok(doc.includes(`\`${s}://`), `${s}:// in connect()'s docs`)
})

test("the tls option's documentation in index.d.ts and docs/api.md names every scheme the registry marks as TLS", () => {
  const types = read('index.d.ts')
  const api = read('docs/api.md')
  const docs = {
    'index.d.ts': types.slice(types.lastIndexOf('/**', types.indexOf('  tls?: TlsOptions')), types.indexOf('  tls?: TlsOptions')),
    'docs/api.md': api.slice(api.indexOf('`tls` applies to'), api.indexOf('`TypeError`', api.indexOf('`tls` applies to'))),
  }
  for (const [file, doc] of Object.entries(docs)) {
    for (const s of STORES.flatMap((e) => e.tls)) assert.ok(doc.includes(`\`${s}://`), `${s}:// in the tls docs of ${file}`)
  }
})

test('the store field of the diagnostics in docs/operations.md names every store of the registry', () => {
  const row = read('docs/operations.md').split('\n').find((l) => l.startsWith('| `store` |'))
  assert.ok(row, 'docs/operations.md has a store row')
  for (const name of [...STORES.map((e) => e.name), 'redlock']) assert.ok(row.includes(`\`${name}\``), name)
})

test("package.json's keywords name every store that has a server or a file", () => {
  const { keywords } = JSON.parse(read('package.json'))
  for (const e of STORES.filter((e) => e.name !== 'memory')) {
    assert.ok([e.name, ...e.schemes].some((k) => keywords.includes(k)), `a keyword for ${e.name}`)
  }
})

// A value connect() accepts for each option some store of the registry lists; an option
// without one fails the test below, so a store's new option is tried here too.
const SAMPLES = {
  table: 'deadbolt_registry', poolSize: 2, tls: { rejectUnauthorized: true },
  createTable: false, partitionKey: 'pk', sortKey: { name: 'sk', value: 'v' }, deleteOnRelease: true,
  credentials: { accessKeyId: 'AKIDREGISTRYTEST', secretAccessKey: 'registry-test-secret' },
}
const URLS = {
  redis: 'rediss://127.0.0.1:1', mysql: 'mysql://root@127.0.0.1:1/test', postgres: 'postgres://u@127.0.0.1:1/test',
  sqlite: `sqlite://${path.join(require('node:os').tmpdir(), `deadbolt-registry-options-${process.pid}.db`)}`,
  dynamodb: 'dynamodb://locks?region=us-east-1&endpoint=http://127.0.0.1:1',
  etcd: 'etcds://127.0.0.1:1', memory: 'memory://registry-options',
}

test('connect() takes every option the registry lists for a store, with that store', async (t) => {
  t.after(() => fs.rmSync(URLS.sqlite, { force: true }))
  for (const e of STORES) {
    assert.ok(URLS[e.name], `a test URL for ${e.name}`)
    const dynamo = e.name === 'dynamodb' ? { credentials: SAMPLES.credentials } : {}
    for (const option of e.options) {
      assert.ok(Object.hasOwn(SAMPLES, option), `a sample value of ${option}`)
      const client = await connect(URLS[e.name], { lazy: true, ...dynamo, [option]: SAMPLES[option] })
      await client.close()
    }
  }
})

test('connect() reads each part of its target once, however many parts of the client use it', async () => {
  let reads = 0
  const target = { sentinels: ['redis://127.0.0.1:1'], get name() { reads += 1; return 'registry' } }
  const client = await connect(target, { lazy: true })
  assert.equal(client.toJSON().store, 'sentinel("registry" via redis://127.0.0.1:1)')
  await client.close()
  assert.equal(reads, 1)
})
