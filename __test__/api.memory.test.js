'use strict'
// The embedded store (no server). Nothing outside deadbolt can delete its locks, so the
// break-from-outside tests run only on the server backends.
const { apiSuite } = require('./api.shared')

apiSuite({
  name: 'memory',
  url: 'memory://api-test',
  need: async () => true,
})
