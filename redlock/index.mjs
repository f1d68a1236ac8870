// `deadbolt/redlock` for `import`: node-redlock 5's exports, Redlock as the default export.
import face from './index.js'

export const { Redlock, Lock, ExecutionError, ResourceLockedError } = face

export default face.default
