'use strict'
// The registry of stores (src/store/registry.rs) is the one list of stores: the client's URL
// check, its message, the CLI's help and the README's Backends table follow it.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { connect } = require('..')
const { stores } = require('../lib/addon')
const cli = require('../lib/cli')

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

for (const [file, heading] of [['README.md', '## Stores'], ['docs/stores/README.md', '## Backends']]) {
  test(`the stores table of ${file} has a row for every scheme of the registry`, () => {
    const text = fs.readFileSync(path.join(__dirname, '..', file), 'utf8')
    const start = text.indexOf(heading)
    assert.ok(start >= 0, `${file} has a ${heading} section`)
    const end = text.indexOf('\n## ', start + 3)
    const table = text.slice(start, end < 0 ? undefined : end)
    for (const s of STORES.flatMap((e) => e.schemes).filter((s) => s !== 'unix')) {
      assert.ok(table.includes(`\`${s}://`), `${s}:// in the stores table of ${file}`)
    }
  })
}
