// Types of `deadbolt/redlock` (import): node-redlock 5's exports, Redlock as the default.
export * from './index.js'
export { default } from './index.js'
