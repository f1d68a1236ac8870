'use strict'
// The torture suite's short form, part "mysql" (see torture.shared.js).

require('./torture.shared').tortureTests('mysql')
