'use strict'
// index.d.ts against real TypeScript (strict): a program using the API, `await using`
// included, must compile, and wrong calls must be refused; the emitted code must run.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

/** A TypeScript package's tsc (TypeScript 7's `exports` hide the file from require.resolve). */
const tscOf = (pkg) => path.join(__dirname, '..', 'node_modules', pkg, 'bin', 'tsc')

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

/** Runs `tsc` (the package's bin) with `args`; fails the test with tsc's own output. */
function compile(bin, args) {
  try {
    execFileSync(process.execPath, [bin, ...args], { encoding: 'utf8' })
  } catch (err) {
    if (err.stdout || err.stderr) assert.fail(`${err.stdout ?? ''}${err.stderr ?? ''}`)
    throw err
  }
}

test('the same program type-checks on TypeScript 7 (the native port), strict', () => {
  assert.equal(require('typescript-7/package.json').version.split('.')[0], '7')
  compile(tscOf('typescript-7'), ['-p', path.join(__dirname, 'ts', 'tsconfig.json'), '--noEmit'])
})

for (const [name, pkg] of [['5', 'typescript'], ['7', 'typescript-7']]) {
  test(`await using compiles on TypeScript ${name} with lib ES2022 alone, @types/node declaring the rest`, () => {
    compile(tscOf(pkg), ['-p', path.join(__dirname, 'ts', 'tsconfig.nolib.json')])
  })
}

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
