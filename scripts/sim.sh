#!/usr/bin/env bash
# A long run of the engine's deterministic simulation, beyond the 10 000 seeds every
# `cargo test` runs (src/sim): `npm run sim -- [first seed] [count]`. Without a first seed it
# draws one (printed) past the seeds CI runs, so that runs made now and then each cover seeds
# no run has covered; every failing seed is printed with the command that replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
from=${1:-$(( (RANDOM * 32768 + RANDOM) % 1000000000 + 10000 ))}
count=${2:-100000}
host=$(rustc -vV | sed -n 's/^host: //p')
echo "sim: seeds $from to $(( from + count - 1 ))"
SIM_FROM=$from SIM_SEEDS=$count SIM_KEEP=${SIM_KEEP:-20} cargo test --target "$host" --lib sim::tests::seeds -- --nocapture
