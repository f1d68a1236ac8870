// Types of `deadbolt/redlock` (import): node-redlock 5's exports, Redlock as the default.
import { Redlock } from './index.js'

export * from './index.js'
export default Redlock
