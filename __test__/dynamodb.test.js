'use strict'
// What only the DynamoDB store has: its URL and options, where its credentials come from and
// that they never show, table creation, the key schema and the release mode, and errors that
// name their cause. Against a throwaway dynalite.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const http = require('node:http')
const os = require('node:os')
const path = require('node:path')
const util = require('node:util')
const { connect, LockBackendError } = require('..')
const { prefix } = require('./helpers')
const { sharedDynalite, rawClient, TEST_CREDENTIALS } = require('./fixtures/dynalite')

const dynalite = sharedDynalite()
const run = prefix('dynamodb')
let n = 0
const key = () => `${run}${++n}`
// A table per test that needs its own (tables never clash across runs: the server is new).
let tables = 0
const table = () => `deadbolt_t${++tables}`

after(() => dynalite.stop())

/** Runs `fn` with the AWS variables of the environment replaced by `vars`. */
async function withEnv(vars, fn) {
  const names = ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN', 'AWS_PROFILE', 'AWS_SHARED_CREDENTIALS_FILE', 'AWS_CONFIG_FILE', 'AWS_REGION', 'AWS_DEFAULT_REGION', 'HOME']
  const saved = Object.fromEntries(names.map((k) => [k, process.env[k]]))
  for (const k of names) delete process.env[k]
  // No home: the default shared files of whoever runs the tests are never read.
  process.env.HOME = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-home-'))
  Object.assign(process.env, vars)
  try {
    return await fn()
  } finally {
    fs.rmSync(process.env.HOME, { recursive: true, force: true })
    for (const k of names) {
      if (saved[k] === undefined) delete process.env[k]
      else process.env[k] = saved[k]
    }
  }
}

function errorText(err) {
  return [err.message, err.stack, util.inspect(err, { depth: 5 }), err.cause && util.inspect(err.cause, { depth: 5 })].join('\n')
}

test('DynamoDB options are refused for other URLs, and other stores\' options for dynamodb://', async () => {
  await assert.rejects(connect('memory://x', { createTable: true }), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE', message: /options\.createTable.*dynamodb:\/\// })
  await assert.rejects(connect('dynamodb://locks?region=us-east-1', { table: 'x', lazy: true }), { name: 'TypeError', message: /options\.table.*URL names the table/ })
  await assert.rejects(connect('dynamodb://locks?region=us-east-1', { poolSize: 3, lazy: true }), { code: 'ERR_INVALID_ARG_VALUE', message: /options\.poolSize/ })
  await assert.rejects(connect('dynamodb://locks?region=us-east-1', { createTabel: true }), { message: /Did you mean "createTable"/ })
})

test('bad DynamoDB options and URLs get a TypeError or RangeError naming them, before any I/O', async () => {
  const url = 'dynamodb://locks?region=us-east-1'
  const cases = [
    [{ createTable: 'yes' }, TypeError, /options\.createTable/],
    [{ deleteOnRelease: 1 }, TypeError, /options\.deleteOnRelease/],
    [{ partitionKey: '' }, RangeError, /options\.partitionKey/],
    [{ partitionKey: 'ownerName' }, TypeError, /options\.partitionKey.*lock items use/],
    [{ sortKey: 'sk' }, TypeError, /options\.sortKey/],
    [{ sortKey: { name: 'sk' } }, TypeError, /options\.sortKey\.value/],
    [{ sortKey: { name: 'key', value: 'v' } }, TypeError, /must differ from the partition key/],
    [{ sortKey: { name: 'sk', value: 'v', extra: 1 } }, TypeError, /unknown option "extra"/],
  ]
  for (const [options, Class, re] of cases) {
    await assert.rejects(connect(url, { lazy: true, ...options }), (err) => err instanceof Class && typeof err.code === 'string' && re.test(err.message), JSON.stringify(options))
  }
  for (const [bad, re] of [['dynamodb://ab?region=us-east-1', /table name/], ['dynamodb://locks?regoin=x', /"regoin"/], ['dynamodb://locks?endpoint=ftp://h', /endpoint/]]) {
    await assert.rejects(connect(bad, { lazy: true }), (err) => err instanceof TypeError && re.test(err.message), bad)
  }
})

test('credentials are checked without ever being shown', async () => {
  const url = 'dynamodb://locks?region=us-east-1'
  const SECRET = 'wJalrXUtnFEMI-not-shown'
  const cases = [
    [{ accessKeyId: 'AKIDNOTSHOWN' }, /secretAccessKey.*type string/],
    [{ accessKeyId: 'AKIDNOTSHOWN', secretAccessKey: '' }, /secretAccessKey.*non-empty/],
    [{ accessKeyId: 'AKIDNOTSHOWN', secretAccessKey: SECRET, sessionToken: 42 }, /sessionToken/],
    [{ accessKeyId: 'AKIDNOTSHOWN', secretAccessKey: SECRET, secret: SECRET }, /credentials\.secret.*not supported/],
    ['AKIDNOTSHOWN', /credentials.*object/],
  ]
  for (const [credentials, re] of cases) {
    await assert.rejects(connect(url, { lazy: true, credentials }), (err) => {
      assert.ok(err instanceof TypeError && re.test(err.message), err.message)
      const text = errorText(err)
      assert.ok(!text.includes('AKIDNOTSHOWN') && !text.includes(SECRET), text)
      return true
    })
  }
  await assert.rejects(connect('memory://x', { credentials: { accessKeyId: 'AKIDNOTSHOWN', secretAccessKey: SECRET } }), (err) => !errorText(err).includes(SECRET))
  const client = await connect(url, { lazy: true, credentials: { accessKeyId: 'AKIDNOTSHOWN', secretAccessKey: SECRET, sessionToken: 'TOKENNOTSHOWN' } })
  for (const text of [util.inspect(client, { depth: 10, showHidden: true }), JSON.stringify(client)]) {
    assert.ok(!/AKIDNOTSHOWN|not-shown|TOKENNOTSHOWN/.test(text), text)
  }
  await client.close()
})

test('credentials a server echoes back in a refusal are masked in the error', async () => {
  // An endpoint that refuses every request and quotes its signature headers, as a proxy or a
  // local DynamoDB may.
  const server = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      res.writeHead(400, { 'content-type': 'application/x-amz-json-1.0' })
      res.end(JSON.stringify({
        __type: 'com.amazonaws.dynamodb.v20120810#UnrecognizedClientException',
        message: `The security token included in the request is invalid: ${req.headers.authorization} ${req.headers['x-amz-security-token']}`,
      }))
    })
  })
  await new Promise((r) => server.listen(0, '127.0.0.1', r))
  try {
    const url = `dynamodb://locks?region=us-east-1&endpoint=http://127.0.0.1:${server.address().port}`
    const credentials = { accessKeyId: 'AKIDECHOED0001', secretAccessKey: 'echoed-secret-0001', sessionToken: 'ECHOEDTOKEN0001' }
    await assert.rejects(connect(url, { credentials }), (err) => {
      assert.ok(err instanceof LockBackendError)
      assert.equal(err.cause.code, 'ERR_LOCK_STORE_AUTH')
      assert.match(err.message + err.cause.message, /UnrecognizedClientException.*credentials were refused/)
      const text = errorText(err)
      assert.ok(!/AKIDECHOED0001|echoed-secret|ECHOEDTOKEN0001/.test(text), text)
      return true
    })
  } finally {
    server.close()
  }
})

test('credentials come from the environment, then from the profile AWS_PROFILE names', async (t) => {
  if (!(await dynalite.need(t))) return
  const url = (tbl) => dynalite.server.url(tbl)
  const home = () => process.env.HOME
  await withEnv({ AWS_ACCESS_KEY_ID: TEST_CREDENTIALS.accessKeyId, AWS_SECRET_ACCESS_KEY: TEST_CREDENTIALS.secretAccessKey }, async () => {
    const c = await connect(url(table()), { createTable: true })
    await c.close()
  })
  await withEnv({ AWS_PROFILE: 'locks' }, async () => {
    fs.mkdirSync(path.join(home(), '.aws'))
    fs.writeFileSync(path.join(home(), '.aws', 'credentials'), '[default]\naws_access_key_id = NOPE\n\n[locks]\naws_access_key_id = AKIDFROMFILE\naws_secret_access_key = from-file\n')
    const c = await connect(url(table()), { createTable: true })
    await c.close()
  })
  await withEnv({}, async () => {
    await assert.rejects(connect(url(table()), { createTable: true }), (err) => {
      assert.ok(err instanceof LockBackendError)
      assert.equal(err.cause.code, 'ERR_LOCK_STORE_INVALID')
      assert.match(err.cause.message, /no AWS credentials.*AWS_ACCESS_KEY_ID/)
      return true
    })
  })
})

test('a missing table is named in the error, and createTable makes it on first use', async (t) => {
  if (!(await dynalite.need(t))) return
  const tbl = table()
  await assert.rejects(connect(dynalite.server.url(tbl), { credentials: TEST_CREDENTIALS }), (err) => {
    assert.ok(err instanceof LockBackendError)
    assert.equal(err.cause.code, 'ERR_LOCK_STORE_NO_DATABASE')
    assert.match(err.cause.message, new RegExp(`table "${tbl}" was not found.*createTable`))
    return true
  })
  const locks = await connect(dynalite.server.url(tbl), { credentials: TEST_CREDENTIALS, createTable: true })
  const lock = await locks.acquire(key())
  assert.equal(await lock.release(), true)
  const { Table } = await rawClient(dynalite.server.endpoint).describeTable({ TableName: tbl }).promise()
  assert.equal(Table.BillingModeSummary?.BillingMode ?? 'PAY_PER_REQUEST', 'PAY_PER_REQUEST')
  assert.deepEqual(Table.KeySchema, [{ AttributeName: 'key', KeyType: 'HASH' }])
  await locks.close()
})

test('locks are items keyed by partitionKey and sortKey, with the Java client\'s attributes', async (t) => {
  if (!(await dynalite.need(t))) return
  const tbl = table()
  const locks = await connect(dynalite.server.url(tbl), { credentials: TEST_CREDENTIALS, createTable: true, partitionKey: 'lockId', sortKey: { name: 'scope', value: 'billing' } })
  const k = key()
  const lock = await locks.acquire(k, { ttl: 7000, data: 'host-a' })
  const { Item } = await rawClient(dynalite.server.endpoint).getItem({ TableName: tbl, Key: { lockId: { S: k }, scope: { S: 'billing' } }, ConsistentRead: true }).promise()
  assert.equal(Item.ownerName.S, lock.owner)
  assert.equal(Item.leaseDuration.S, '7000')
  assert.match(Item.recordVersionNumber.S, /^[0-9a-f-]{36}$/)
  assert.equal(Item.fencingToken.N, String(lock.fencingToken))
  // deadbolt's one-byte type tag, then the payload.
  assert.equal(Buffer.from(Item.data.B).toString(), 'shost-a')
  assert.equal(Item.isReleased, undefined)
  await lock.release()
  await locks.close()
})

test('deleteOnRelease deletes the item on release, as the Java client does by default', async (t) => {
  if (!(await dynalite.need(t))) return
  const raw = rawClient(dynalite.server.endpoint)
  const keep = await connect(dynalite.server.url(), { credentials: TEST_CREDENTIALS, createTable: true })
  const del = await connect(dynalite.server.url(), { credentials: TEST_CREDENTIALS, deleteOnRelease: true })
  const [k1, k2] = [key(), key()]
  await (await keep.acquire(k1)).release()
  await (await del.acquire(k2)).release()
  const kept = await raw.getItem({ TableName: 'deadbolt_locks', Key: { key: { S: k1 } } }).promise()
  assert.equal(kept.Item.isReleased.S, '1')
  assert.ok(kept.Item.fencingToken, 'a released item keeps its fencing counter')
  const gone = await raw.getItem({ TableName: 'deadbolt_locks', Key: { key: { S: k2 } } }).promise()
  assert.equal(gone.Item, undefined)
  await keep.close()
  await del.close()
})

test('a payload a Java client stored reads back as the same bytes', async (t) => {
  if (!(await dynalite.need(t))) return
  const locks = await connect(dynalite.server.url(), { credentials: TEST_CREDENTIALS, createTable: true })
  const k = key()
  await rawClient(dynalite.server.endpoint).putItem({
    TableName: 'deadbolt_locks',
    Item: { key: { S: k }, ownerName: { S: 'java-host' }, leaseDuration: { S: '20000' }, recordVersionNumber: { S: 'v1' }, data: { B: Buffer.from('server-1') } },
  }).promise()
  const info = await locks.inspect(k)
  assert.equal(info.owner, 'java-host')
  assert.equal(info.fencingToken, null)
  assert.deepEqual(info.data, Buffer.from('server-1'))
  assert.ok(info.remainingMs > 0 && info.remainingMs <= 20000)
  await locks.close()
})
