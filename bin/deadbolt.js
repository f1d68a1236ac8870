#!/usr/bin/env node
'use strict'
// `npx deadbolt <command> <url> …`: the operator's CLI (see lib/tools/cli.js, or --help).

const { main, runsUntilStopped } = require('../lib/tools/cli')

// `watch`, `top` and `dashboard` run until stopped: a first Ctrl-C or SIGTERM ends them
// gracefully. Any other command ends at once, as a process without handlers would (it may be
// waiting on a store that does not answer).
const live = runsUntilStopped(process.argv.slice(2))

let stopped = false
/** Called once at the first stop (top's pause, the dashboard's wait). */
const onStop = new Set()
function stop() {
  stopped = true
  for (const fn of onStop) fn()
  onStop.clear()
}
process.on('SIGINT', () => {
  // The first Ctrl-C ends `watch` and `top` after their current look, and stops the
  // dashboard; a second one ends at once.
  if (stopped || !live) process.exit(130)
  stop()
})
process.on('SIGTERM', () => {
  if (stopped || !live) process.exit(143)
  stop()
})

main(process.argv.slice(2), {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  write: (text) => process.stdout.write(text),
  tty: process.stdout.isTTY === true,
  columns: () => process.stdout.columns ?? 0,
  stdin: process.stdin,
  env: process.env,
  stopped: () => stopped,
  sleep: (ms) => new Promise((resolve) => {
    const timer = setTimeout(done, ms)
    function done() {
      clearTimeout(timer)
      onStop.delete(done)
      resolve()
    }
    onStop.add(done)
  }),
  until: () => new Promise((resolve) => {
    if (stopped) resolve()
    else onStop.add(resolve)
  }),
}).then((code) => {
  process.exitCode = code
})
