#!/usr/bin/env node
// `npm install` / `npm ci` on a clone builds the addon from source (release profile), once.
// DEADBOLT_SKIP_BUILD=1 skips it (for example when only JavaScript dependencies changed).
'use strict'
const { spawnSync } = require('node:child_process')

if (process.env.DEADBOLT_SKIP_BUILD === '1') {
  console.log('deadbolt: DEADBOLT_SKIP_BUILD=1, not building the addon')
  process.exit(0)
}
const args = ['build', '--platform', '--release', '--js', 'binding.js', '--dts', 'binding.d.ts']
// npm puts node_modules/.bin on PATH for lifecycle scripts, so the CLI's own bin is found.
const r = spawnSync('napi', args, { stdio: 'inherit', shell: process.platform === 'win32' })
if (r.error) console.error(`deadbolt: could not run napi (${r.error.message}); is @napi-rs/cli installed?`)
process.exit(r.status ?? 1)
