#!/usr/bin/env bash
# The whole test suite (`npm test`): style, lint, licence and duplicate-crate gates, Rust unit
# tests, then the node --test specs against real servers (started by services.sh when they are
# not up).
# Expects the addon built by `npm install` (or `npm run build`); it does not rebuild it.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "servers"
bash scripts/services.sh redis mariadb postgres etcd

step "eslint (lib, compat, bin, scripts, __test__)"
npm run --silent lint

step "cargo deny check licenses bans (offline)"
if ! command -v cargo-deny >/dev/null; then
  echo "cargo-deny is not installed: cargo install cargo-deny --locked" >&2
  exit 1
fi
cargo deny --offline check licenses bans

step "cargo fmt --check"
cargo fmt --check

# napi builds under target/<host triple>/; naming the same triple lets debug builds share
# compiled dependencies with `npm run build:debug`.
host=$(rustc -vV | sed -n 's/^host: //p')

step "cargo clippy -- -D warnings"
cargo clippy --target "$host" --all-targets -- -D warnings

step "cargo test"
cargo test --target "$host"

step "generated binding is committed and current"
if [ -d .git ] && ! git diff --exit-code -- binding.js binding.d.ts; then
  echo "binding.js / binding.d.ts differ from the committed ones: commit the regenerated files" >&2
  exit 1
fi

if ! ls deadbolt.*.node >/dev/null 2>&1; then
  echo "The addon is not built: run 'npm install' (or 'npm run build') first" >&2
  exit 1
fi

# Node 24, fetched once into .cache/node24 from the npm registry: weblocks.node24.test.js runs
# the Web Locks scenarios against its navigator.locks, and deadbolt's under it. Offline, the
# fetch fails and that test says so (it fails under CI, skips elsewhere).
step "Node 24 for the Web Locks comparison (scripts/node24.js)"
node scripts/node24.js || echo "Node 24 could not be fetched: weblocks.node24.test.js will say so" >&2

step "node --test"
node --test --test-concurrency=1 __test__/
