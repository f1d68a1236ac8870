'use strict'
// The modern API's shared suite on SQLite: one database file in a temporary directory. A lock
// is broken from outside by a second client with options of its own (so a separate engine
// and connection, as another process would have) forcing its release.
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { after } = require('node:test')
const { connect } = require('..')
const { apiSuite } = require('./api.shared')

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deadbolt-api-sqlite-'))
const url = `sqlite://${path.join(dir, 'locks.db')}`

let outsider = null

after(async () => {
  if (outsider !== null) await outsider.close()
  fs.rmSync(dir, { recursive: true, force: true })
})

apiSuite({
  name: 'sqlite',
  url,
  need: async () => true,
  breakLock: async (key) => {
    if (outsider === null) outsider = await connect(url, { responseTimeout: 4999 })
    if (!(await outsider.forceRelease(key))) throw new Error(`breakLock: no live lease for ${key}`)
  },
  crossProcess: true,
  fairAcrossProcesses: true,
})
