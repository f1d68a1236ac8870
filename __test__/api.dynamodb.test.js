'use strict'
// The modern API's shared suite on DynamoDB (a throwaway dynalite), in the Java lock client's
// table layout. Every test of the suite runs as it is: within one process the store counts a
// lease from the write that started it, as every other store's server does, and the tests that
// involve another process (fencing across 4 processes, a dead leader's takeover) hold under
// the watch-a-lease rule (see __test__/dynamodb.interop.test.js for the protocol itself).
// A lock is broken from outside by deleting its item with the aws-sdk, as an operator might.
const { after } = require('node:test')
const { apiSuite } = require('./api.shared')
const { connect } = require('..')
const { sharedDynalite, rawClient, TEST_CREDENTIALS } = require('./fixtures/dynalite')

// The child processes of the suite connect with the URL alone: credentials come from the
// environment, as they would on AWS.
process.env.AWS_ACCESS_KEY_ID = TEST_CREDENTIALS.accessKeyId
process.env.AWS_SECRET_ACCESS_KEY = TEST_CREDENTIALS.secretAccessKey

const dynalite = sharedDynalite()
let tableReady = null

after(() => dynalite.stop())

apiSuite({
  name: 'dynamodb',
  get url() { return dynalite.server.url() },
  need: async (t) => {
    if (!(await dynalite.need(t))) return false
    tableReady ??= connect(dynalite.server.url(), { createTable: true }).then((c) => c.close())
    await tableReady
    return true
  },
  breakLock: async (key) => {
    const deleted = await rawClient(dynalite.server.endpoint).deleteItem({
      TableName: 'deadbolt_locks',
      Key: { key: { S: key } },
      ReturnValues: 'ALL_OLD',
    }).promise()
    if (!deleted.Attributes) throw new Error(`breakLock: no item for ${key}`)
  },
  crossProcess: true,
})
