'use strict'
// The torture suite's short form, part "redis" (see torture.shared.js).

require('./torture.shared').tortureTests('redis')
