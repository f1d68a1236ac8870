'use strict'
// The torture suite's short form, part "failover" (see torture.shared.js).

require('./torture.shared').tortureTests('failover')
