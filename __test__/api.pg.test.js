'use strict'
// The modern API's shared suite on PostgreSQL. A lock is broken from outside by deleting its
// lease row with a plain `pg` connection, as an operator (or a bug elsewhere) might.
const { after } = require('node:test')
const { apiSuite } = require('./api.shared')
const { PG_URL, needPg } = require('./helpers')

let raw = null
async function rawPg() {
  if (raw === null) {
    const { Client } = require('pg')
    raw = new Client({ connectionString: PG_URL })
    await raw.connect()
  }
  return raw
}

after(async () => { if (raw !== null) await raw.end() })

apiSuite({
  name: 'postgres',
  url: PG_URL,
  need: needPg,
  breakLock: async (key) => {
    const conn = await rawPg()
    const res = await conn.query('DELETE FROM deadbolt_locks WHERE name = $1', [Buffer.from(key)])
    if (res.rowCount !== 1) throw new Error(`breakLock: no lease row for ${key}`)
  },
  // Lease rows outlive their locks until purged: drop this run's.
  cleanup: async (runPrefix) => {
    const conn = await rawPg()
    const lower = Buffer.from(runPrefix)
    const upper = Buffer.from(runPrefix)
    upper[upper.length - 1]++
    await conn.query('DELETE FROM deadbolt_locks WHERE name >= $1 AND name < $2', [lower, upper])
  },
  crossProcess: true,
  fairAcrossProcesses: true,
})
