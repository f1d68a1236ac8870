// `deadbolt/redlock/v4` for `import`: node-redlock 4's Redlock as the default export.
import Redlock from './v4.js'

export const { Lock, LockError } = Redlock

export default Redlock
