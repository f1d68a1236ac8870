#!/usr/bin/env bash
# `npm run release:check [-- <dir>]`: checks the Linux binaries `npm run build:linux` left in
# dist/ (or <dir>) before they are published. Not part of `npm test`: it needs the release
# builds of four targets, and qemu. What it proves, per binary:
#
#  - it is an ELF shared object for its architecture (x86-64 or AArch64, as readelf says);
#  - gnu: every versioned symbol it imports from glibc is GLIBC_2.17 or older, and it needs no
#    library beyond glibc's own (libc, libm, libdl, libpthread, librt, ld-linux) and libgcc_s:
#    any glibc from 2.17 on (CentOS 7, Amazon Linux 2, Debian 8+, Ubuntu 14.04+) loads it;
#  - musl: it imports no glibc-versioned symbol and needs only musl's libc (`libc.so`), which
#    every musl system (node:*-alpine) has;
#  - linux-x64-gnu: this machine's node loads it and takes and releases a lock on the
#    in-process store, on a SQLite file and on Redis (REDIS_URL, default the local server);
#  - linux-arm64-gnu: the same, under qemu-user with Debian's arm64 nodejs (Node 18 on Debian
#    12: release-smoke.js supplies Node 20's String.prototype.isWellFormed), unpacked from its
#    .deb files into target/release-check/arm64-root (never installed on this machine);
#  - musl: musl's own dynamic loader (Debian's `musl` 1.2.3, x64 natively, arm64 under qemu)
#    links it, and every symbol it leaves unresolved is a `napi_*` one, which node provides: all
#    it takes from the C library, musl has. The musl binaries are not run in a node: no musl
#    Node.js comes from a registry reachable here.
#
# Installs when missing: binutils (objdump) and qemu-user-static (Debian packages), and adds
# the arm64 architecture to apt for the download of nodejs:arm64 and its libraries.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${1:-dist}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
ROOTFS=target/release-check/arm64-root
failed=0

say() { printf 'release:check: %s\n' "$*"; }
bad() { printf 'release:check: FAIL: %s\n' "$*" >&2; failed=1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need=()
command -v objdump >/dev/null || need+=(binutils)
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
[ -x /lib/ld-musl-x86_64.so.1 ] || need+=(musl)
arm64=$(dpkg --print-foreign-architectures | grep -cx arm64 || true)
if [ ${#need[@]} -gt 0 ] || [ "$arm64" = 0 ]; then
  [ "$arm64" = 0 ] && as_root dpkg --add-architecture arm64
  as_root apt-get update -qq
  [ ${#need[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need[@]}"
fi

# Debian's arm64 node, the libraries it loads and the JavaScript modules Debian's build keeps
# outside it (node-acorn, node-cjs-module-lexer, node-undici: architecture-independent),
# unpacked (not installed: nodejs:arm64 would replace this machine's node).
arm64_node() {
  [ -x "$ROOTFS/usr/bin/node" ] && return 0
  local debs=target/release-check/debs
  mkdir -p "$debs" "$ROOTFS"
  local pkgs
  pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances --no-pre-depends nodejs:arm64 | grep -E '^[a-z0-9]' |
    grep -E ':arm64$|^node-' | grep -vE '^(dpkg|tar|install-info)(:|$)' | sort -u)
  (cd "$debs" && apt-get download $pkgs >/dev/null)
  for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$ROOTFS"; done
}

# Debian's arm64 musl (its loader), unpacked like the node above.
arm64_musl() {
  local root=target/release-check/musl-arm64 debs=target/release-check/musl-debs
  if [ ! -x "$root/lib/ld-musl-aarch64.so.1" ]; then
    mkdir -p "$root" "$debs"
    (cd "$debs" && apt-get download musl:arm64 >/dev/null)
    dpkg-deb -x "$debs"/musl_*_arm64.deb "$root"
  fi
  echo "$root"
}

# Links `file` with musl's loader (`ld-musl-… --list`, its ldd) and fails on any unresolved
# symbol that node does not provide (napi_*).
musl_links() { # file, loader command…
  local f=$1 name out missing
  shift
  name=$(basename "$f")
  out=$("$@" --list "$f" 2>&1 || true)
  grep -q 'ld-musl' <<<"$out" || { bad "$name: musl's loader did not run: $out"; return; }
  missing=$(grep 'symbol not found' <<<"$out" | sed -E 's/.*: ([A-Za-z_0-9.@]+): symbol not found/\1/' | grep -v '^napi_' | sort -u | tr '\n' ' ' || true)
  if [ -n "$missing" ]; then bad "$name: musl's libc lacks $missing"
  else say "$name: musl's loader resolves every symbol but node's ($(grep -c 'napi_.*symbol not found' <<<"$out") napi_*)"; fi
}

check_elf() { # file, expected machine (readelf reads every architecture; objdump -f only the host's)
  local machine
  machine=$(readelf -h "$1" 2>/dev/null | sed -n 's/^ *Machine: *//p')
  [ "$machine" = "$2" ] || bad "$(basename "$1"): machine ${machine:-unreadable}, expected $2"
  readelf -h "$1" | grep -q 'Type: *DYN' || bad "$(basename "$1"): not a shared object"
}

needed() { objdump -p "$1" | awk '$1 == "NEEDED" { print $2 }' | sort -u | tr '\n' ' '; }

check_gnu() {
  local f=$1 name newest libs
  name=$(basename "$f")
  newest=$(objdump -T "$f" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
  if [ -z "$newest" ]; then bad "$name imports no GLIBC_ symbol: not linked against glibc?"
  elif [ "$(printf '%s\n2.17\n' "$newest" | sort -V | tail -1)" != 2.17 ]; then bad "$name needs GLIBC_$newest (newer than 2.17)"
  else say "$name: newest glibc symbol version GLIBC_$newest (<= 2.17)"; fi
  libs=$(needed "$f")
  for lib in $libs; do
    case $lib in
      libc.so.6 | libm.so.6 | libdl.so.2 | libpthread.so.0 | librt.so.1 | libgcc_s.so.1 | ld-linux-*.so.*) ;;
      *) bad "$name needs $lib, which is not part of glibc" ;;
    esac
  done
  say "$name: needs $libs"
}

check_musl() {
  local f=$1 name libs ok=1
  name=$(basename "$f")
  if objdump -T "$f" | grep -q 'GLIBC_'; then bad "$name imports glibc-versioned symbols"; ok=0; fi
  libs=$(needed "$f")
  [ "$libs" = "libc.so " ] || { bad "$name needs '$libs', expected only musl's libc.so"; ok=0; }
  [ $ok = 0 ] || say "$name: needs $libs(musl's libc), no glibc symbol"
}

X64='Advanced Micro Devices X86-64'
declare -A ARCH=([linux-x64-gnu]=$X64 [linux-arm64-gnu]=AArch64 [linux-x64-musl]=$X64 [linux-arm64-musl]=AArch64)
for platform in linux-x64-gnu linux-arm64-gnu linux-x64-musl linux-arm64-musl; do
  f="$dir/deadbolt.$platform.node"
  if [ ! -f "$f" ]; then bad "$f is missing: run npm run build:linux"; continue; fi
  say "$(basename "$f"): $(stat -c %s "$f") bytes"
  check_elf "$f" "${ARCH[$platform]}"
  case $platform in *-gnu) check_gnu "$f" ;; *-musl) check_musl "$f" ;; esac
  case $platform in
    linux-x64-musl) musl_links "$f" /lib/ld-musl-x86_64.so.1 ;;
    linux-arm64-musl)
      root=$(arm64_musl)
      musl_links "$f" qemu-aarch64-static -L "$root" "$root/lib/ld-musl-aarch64.so.1"
      ;;
  esac
done

if [ -f "$dir/deadbolt.linux-x64-gnu.node" ]; then
  NAPI_RS_NATIVE_LIBRARY_PATH="$(realpath "$dir/deadbolt.linux-x64-gnu.node")" REDIS_URL=$REDIS_URL \
    node scripts/release-smoke.js || bad "linux-x64-gnu did not take a lock with this machine's node"
fi
if [ -f "$dir/deadbolt.linux-arm64-gnu.node" ]; then
  arm64_node
  NAPI_RS_NATIVE_LIBRARY_PATH="$(realpath "$dir/deadbolt.linux-arm64-gnu.node")" REDIS_URL=$REDIS_URL \
    qemu-aarch64-static -L "$ROOTFS" "$ROOTFS/usr/bin/node" scripts/release-smoke.js ||
    bad "linux-arm64-gnu did not take a lock under qemu with Debian's arm64 node"
fi

if [ $failed = 0 ]; then say "all checks passed"; else say "some checks FAILED"; exit 1; fi
