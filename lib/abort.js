'use strict'
// AbortController without relying on the global at load time. Node has it as a global, but a
// test runner's sandbox may not (jest 25/26's node environment has no AbortController,
// AbortSignal or EventTarget), while deadbolt's modules are evaluated inside that sandbox.
// Looked up on first use, so a missing one only matters when a signal is actually needed:
// the global if there is one, else Node's own class (util.transferableAbortController,
// Node ≥ 18.11, makes an instance of it).

let Controller = null

function abortControllerClass() {
  if (Controller !== null) return Controller
  if (typeof AbortController === 'function') {
    Controller = AbortController
  } else {
    const util = require('util')
    if (typeof util.transferableAbortController !== 'function') {
      throw new Error('deadbolt: this environment has no AbortController (lock.signal and elections need one)')
    }
    Controller = util.transferableAbortController().constructor
  }
  return Controller
}

/** A new AbortController. */
function newAbortController() {
  const C = abortControllerClass()
  return new C()
}

module.exports = { newAbortController }
