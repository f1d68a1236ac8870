'use strict'
// `deadbolt/redlock`: node-redlock 5's exports (5.0.0-beta.2, the API its README documents),
// so that changing the import is the whole migration. The default export is Redlock, as
// `import Redlock from 'redlock'` and `require('redlock').default` expect. node-redlock 4's
// callback API (npm's `latest` tag) is `deadbolt/redlock/v4`. See docs/redlock.md.

const { Redlock, Lock, ExecutionError, ResourceLockedError } = require('../compat/redlock')

Object.defineProperty(exports, '__esModule', { value: true })
exports.default = Redlock
exports.Redlock = Redlock
exports.Lock = Lock
exports.ExecutionError = ExecutionError
exports.ResourceLockedError = ResourceLockedError
