'use strict'
// `deadbolt/redlock/v4`: node-redlock 4.2's export (npm's `latest` redlock), the Redlock
// constructor with Redlock.Lock and Redlock.LockError, so that changing require('redlock') to
// require('deadbolt/redlock/v4') is the whole migration. See docs/redlock.md.

module.exports = require('../compat/redlock-v4')
