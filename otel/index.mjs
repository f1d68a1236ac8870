// `deadbolt/otel` for `import`: the same functions as the CommonJS entry (one shared module).
import otel from './index.js'

export const { instrument, defaultLockName } = otel

export default otel
