'use strict'
// The modern API's shared suite on MySQL/MariaDB. A lock is broken from outside by deleting
// its lease row with a plain mysql2 connection, as an operator (or a bug elsewhere) might.
const { after } = require('node:test')
const { apiSuite } = require('./api.shared')
const { MYSQL_URL, needMysql } = require('./helpers')

let raw = null
async function rawMysql() {
  if (raw === null) raw = await require('mysql2/promise').createConnection(MYSQL_URL)
  return raw
}

after(async () => { if (raw !== null) await raw.end() })

apiSuite({
  name: 'mysql',
  url: MYSQL_URL,
  need: needMysql,
  breakLock: async (key) => {
    const conn = await rawMysql()
    const [res] = await conn.query('DELETE FROM deadbolt_locks WHERE name = ?', [Buffer.from(key)])
    if (res.affectedRows !== 1) throw new Error(`breakLock: no lease row for ${key}`)
  },
  // Lease rows outlive their locks (they keep the fencing counter): drop this run's.
  cleanup: async (runPrefix) => {
    const conn = await rawMysql()
    await conn.query("DELETE FROM deadbolt_locks WHERE name LIKE CONCAT(?, '%')", [Buffer.from(runPrefix.replace(/[\\%_]/g, '\\$&'))])
  },
  crossProcess: true,
})
