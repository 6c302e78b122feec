#!/bin/bash
# Packs what tests/bench/scaleup.sh needs to run on a bare Linux x86-64
# machine (no compiler, no Python, no packages): a Release build of shoal,
# shoal-engine and loadgen (and this machine's curl), every shared library
# they load and the dynamic loader, the data made ready by scaleup_data.sh,
# and the script. On the target:
#   tar xzf shoal-scaleup.tar.gz && shoal-scaleup/scaleup.sh --quick
# (binaries run as lib/ld-linux-x86-64.so.2 --library-path lib bin/shoal ...)
#
# Usage: tests/bench/bundle.sh [OUT.tar.gz]   (default $TMPDIR/shoal-scaleup.tar.gz)
# Environment: BUILD=DIR takes that build (its CMAKE_BUILD_TYPE must be
#   Release) instead of configuring and building <repo>/build-release;
#   GCIDE_NDJSON=FILE passes an already stripped corpus to scaleup_data.sh.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="${1:-${TMPDIR:-/tmp}/shoal-scaleup.tar.gz}"
case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac
MAX_MB=60
BINS="shoal shoal-engine loadgen"

if [ -z "${BUILD:-}" ]; then
  BUILD="$ROOT/build-release"
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j2 --target $BINS >/dev/null
fi
bt=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)
[ "$bt" = Release ] || { echo "bundle.sh: $BUILD is a '${bt:-unknown}' build, not Release" >&2; exit 1; }
for b in $BINS; do [ -x "$BUILD/bin/$b" ] || { echo "bundle.sh: $BUILD/bin/$b missing" >&2; exit 1; }; done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal-bundle.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
S="$TMP/shoal-scaleup"
mkdir -p "$S/bin" "$S/lib" "$S/data"
for b in $BINS; do cp "$BUILD/bin/$b" "$S/bin/"; done
# curl drives _bulk; a target without one uses this copy
CURL_BIN=$(command -v curl || true)
[ -z "$CURL_BIN" ] || cp "$CURL_BIN" "$S/bin/curl"

# every library ldd resolves, copied under the name the binary asks for
for b in "$S"/bin/*; do
  ldd "$b" | while read -r name arrow path _; do
    if [ "$arrow" = "=>" ] && [ -n "$path" ] && [ "${path#/}" != "$path" ]; then
      [ -e "$S/lib/$name" ] || cp -L "$path" "$S/lib/$name"
    elif [ "${name#/}" != "$name" ] && [ "$(basename "$name")" = ld-linux-x86-64.so.2 ]; then
      [ -e "$S/lib/ld-linux-x86-64.so.2" ] || cp -L "$name" "$S/lib/ld-linux-x86-64.so.2"
    elif [ "$arrow" = "=>" ] && [ "$path" = "not" ]; then
      echo "bundle.sh: $b: $name not found" >&2; exit 1
    fi
  done
done
[ -e "$S/lib/ld-linux-x86-64.so.2" ] || { echo "bundle.sh: no x86-64 dynamic loader in ldd's output" >&2; exit 1; }
# glibc loads libgcc_s on its own when a thread unwinds; ldd does not list it
if [ ! -e "$S/lib/libgcc_s.so.1" ]; then
  g=$(ldconfig -p 2>/dev/null | awk '/libgcc_s.so.1 .*x86-64/ { print $NF; exit }')
  [ -z "$g" ] || cp -L "$g" "$S/lib/libgcc_s.so.1"
fi
# each binary must start through the bundled loader and libraries alone
for b in $BINS; do
  env -i "$S/lib/ld-linux-x86-64.so.2" --library-path "$S/lib" --list "$S/bin/$b" \
    | grep -v "$S/lib" | grep -v 'linux-vdso' | grep . && { echo "bundle.sh: $b loads a library from outside lib/" >&2; exit 1; }
done

"$HERE/scaleup_data.sh" "$S/data"
cp "$HERE/scaleup.sh" "$S/"
cp "$ROOT/docs/scaleup.md" "$S/README.md"
{
  echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' + local changes'), $bt build;"
  echo "built with $(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt") on $(ldd --version | head -1 | sed 's/^ldd //'), bundled $(date -u '+%Y-%m-%d %H:%M UTC')"
} > "$S/VERSION"

tar -C "$TMP" -czf "$OUT" shoal-scaleup
mb=$(du -m "$OUT" | cut -f1)
echo "bundle.sh: $OUT, $mb MB ($(ls "$S/lib" | wc -l) libraries, $(du -sm "$S/data" | cut -f1) MB of data)"
[ "$mb" -lt "$MAX_MB" ] || { echo "bundle.sh: over $MAX_MB MB" >&2; exit 1; }
