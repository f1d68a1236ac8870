'use strict'
// The modern API's shared suite on etcd (a throwaway single member, __test__/fixtures/etcd.js).
// A lock is broken from outside by deleting its key through etcd's gateway, as an operator with
// etcdctl might.
const { after } = require('node:test')
const { apiSuite } = require('./api.shared')
const { sharedEtcd, post } = require('./fixtures/etcd')

const etcd = sharedEtcd()

after(() => etcd.stop())

apiSuite({
  name: 'etcd',
  get url() { return etcd.server.url() },
  need: (t) => etcd.need(t),
  breakLock: async (key) => {
    const k = Buffer.concat([Buffer.from('deadbolt/l/'), Buffer.from(key)]).toString('base64')
    const res = await post(etcd.server.members[0].clientPort, '/v3/kv/deleterange', { key: k })
    if (res.deleted !== '1') throw new Error(`breakLock: no key for ${key}`)
  },
  crossProcess: true,
  fairAcrossProcesses: true,
})
