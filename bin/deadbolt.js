#!/usr/bin/env node
'use strict'
// `npx deadbolt <command> <url> …`: the operator's CLI (see lib/cli.js, or --help).

const { main } = require('../lib/cli')

let stopped = false
process.on('SIGINT', () => {
  // The first Ctrl-C ends `watch` after its current look; a second one ends at once.
  if (stopped) process.exit(130)
  stopped = true
})

main(process.argv.slice(2), {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  stdin: process.stdin,
  env: process.env,
  stopped: () => stopped,
}).then((code) => {
  process.exitCode = code
})
