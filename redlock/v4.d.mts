// Types of `deadbolt/redlock/v4` (import): node-redlock 4's Redlock as the default export.
import Redlock from './v4.js'

export declare const Lock: typeof Redlock.Lock
export type Lock = Redlock.Lock
export declare const LockError: typeof Redlock.LockError
export type LockError = Redlock.LockError
export default Redlock
