'use strict'
// index.d.ts against real TypeScript (strict): a program using the API, `await using`
// included, must compile, and wrong calls must be refused; the emitted code must run.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

test('a strict TypeScript program using the API and await using compiles and runs', () => {
  const tsc = require.resolve('typescript/bin/tsc')
  const project = path.join(__dirname, 'ts', 'tsconfig.json')
  // Emitted beside its source (gitignored), where its require('../..') is this package.
  const emitted = path.join(__dirname, 'ts', 'usage.js')
  try {
    execFileSync(process.execPath, [tsc, '-p', project], { encoding: 'utf8' })
    const stdout = execFileSync(process.execPath, [emitted], { encoding: 'utf8' })
    assert.equal(stdout.trim(), 'ok')
  } catch (err) {
    if (err.stdout || err.stderr) assert.fail(`${err.stdout ?? ''}${err.stderr ?? ''}`)
    throw err
  } finally {
    fs.rmSync(emitted, { force: true })
  }
})

test('the generated binding.d.ts compiles under tsc --strict', () => {
  const tsc = require.resolve('typescript/bin/tsc')
  try {
    execFileSync(process.execPath, [tsc, '--strict', '--noEmit', path.join(__dirname, '..', 'binding.d.ts')], { encoding: 'utf8' })
  } catch (err) {
    assert.fail(`${err.stdout ?? ''}${err.stderr ?? ''}`)
  }
})

test('lib/native.js type-checks against the generated binding.d.ts', () => {
  // The record layout and the completion kinds come from the addon (protocol()); a field
  // JavaScript writes that binding.d.ts does not declare fails here.
  const tsc = require.resolve('typescript/bin/tsc')
  const args = ['--noEmit', '--allowJs', '--target', 'es2024', '--module', 'commonjs', '--moduleResolution', 'node', '--types', 'node', '--resolveJsonModule']
  try {
    execFileSync(process.execPath, [tsc, ...args, path.join(__dirname, '..', 'lib', 'native.js')], { encoding: 'utf8' })
  } catch (err) {
    assert.fail(`${err.stdout ?? ''}${err.stderr ?? ''}`)
  }
})
