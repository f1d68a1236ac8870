'use strict'
// `deadbolt/otel`: OpenTelemetry spans and metrics for every deadbolt client of the process
// (see lib/otel.js). Needs `@opentelemetry/api` (an optional peer dependency of deadbolt).

const { instrument, defaultLockName } = require('../lib/otel')

module.exports = { instrument, defaultLockName }
