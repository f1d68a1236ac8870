#!/usr/bin/env bash
# The whole test suite (`npm test`): style, lint, licence and duplicate-crate gates, Rust unit
# tests, then the node --test specs against real servers. On a fresh clone it installs what it
# uses first: the servers and tools (services.sh, Debian packages), the npm dev dependencies
# and, when it is not built or older than the Rust sources, the addon: a debug build, once
# (`npm ci` is told not to build; the debug build compiles in about half the time of the
# release one, and keeps Rust's debug assertions and overflow checks on under the specs). An
# addon already built and current, release or debug, is used as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step says how far into the run it starts, so a slow run shows where its time went.
step() { printf '\n== %s (at %d s)\n' "$*" "$SECONDS"; }

step "servers and tools"
bash scripts/services.sh redis mariadb postgres etcd tools

step "npm dependencies"
# npm records what it installed in node_modules/.package-lock.json: install again when the
# lockfile changed after that (a pull that added a dev dependency), never otherwise.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  # The addon is built below, once, whatever npm's `prepare` would do.
  DEADBOLT_SKIP_BUILD=1 npm ci --no-audit --no-fund
else
  echo "node_modules matches package-lock.json"
fi

# redis-semaphore's npm tarball has no tests: __test__/redis-semaphore.spec.test.js runs the
# suite from a checkout of its repository, at the commit of its newest tagged suite (5.7.0).
suite=.cache/redis-semaphore
if [ ! -f "$suite/test/src/RedisMutex.test.ts" ]; then
  step "redis-semaphore's test suite: clone into $suite"
  rm -rf "$suite"
  timeout 120 git clone --quiet https://github.com/swarthy/redis-semaphore "$suite" \
    && git -C "$suite" checkout --quiet 63c2d013a3182aa4deeb7c60fd1465687e11cb36 \
    || echo "could not clone redis-semaphore: its suite is skipped"
fi

# The specs test the built addon: build it when there is none, or when a Rust source or the
# lockfile is newer than it (a pull, a merge), so a stale binary is never what passes.
addon=$(ls -t deadbolt.*.node 2>/dev/null | head -1 || true)
if [ -z "$addon" ]; then
  step "the addon is not built: npm run build:debug"
  npm run build:debug
elif [ -n "$(find src build.rs Cargo.toml Cargo.lock -newer "$addon" -print -quit)" ]; then
  step "the addon is older than the Rust sources: npm run build:debug"
  npm run build:debug
fi

step "eslint (lib, compat, bin, scripts, __test__)"
npm run --silent lint

step "crate licences and bans (deny.toml, offline)"
node scripts/crate-policy.js

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

# Node 24, fetched once into .cache/node24 from the npm registry: weblocks.node24.test.js runs
# the Web Locks scenarios against its navigator.locks, and deadbolt's under it. Offline, the
# fetch fails and that test says so (it fails under CI, skips elsewhere).
step "Node 24 for the Web Locks comparison (scripts/node24.js)"
node scripts/node24.js || echo "Node 24 could not be fetched: weblocks.node24.test.js will say so" >&2

# Two spec files at a time: most of a spec's time is spent waiting on servers, leases and
# child processes, not on the CPU (one at a time they took 19½ minutes here, two 11½).
step "node --test"
node --test --test-concurrency=2 __test__/
step "done"
