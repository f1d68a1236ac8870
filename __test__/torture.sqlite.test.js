'use strict'
// The torture suite's short form, part "sqlite" (see torture.shared.js).

require('./torture.shared').tortureTests('sqlite')
