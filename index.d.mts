// Types of deadbolt's ESM entry (index.mjs): the same names as index.d.ts, and the CommonJS
// module object as the default export.
import deadbolt from './index.js'

export * from './index.js'
export default deadbolt
