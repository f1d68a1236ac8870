// Types of `deadbolt/otel` (import): the named exports and the module object as default.
import otel from './index.js'

export * from './index.js'
export default otel
