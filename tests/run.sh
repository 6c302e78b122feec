#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test.
#   tests/run.sh            release build (build/), all tests
#   SHOAL_SANITIZE=address,undefined BUILD_DIR=build-asan tests/run.sh
#   TEST_LABEL=unit tests/run.sh   only the C unit tests
#   TEST_REGEX='api_test_rest' tests/run.sh   tests whose name matches
set -euo pipefail
cd "$(dirname "$0")/.."
bash cluster-scripts/install-deps.sh --with-tests

BUILD_DIR=${BUILD_DIR:-build}
SAN=${SHOAL_SANITIZE:-}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHOAL_SANITIZE="$SAN" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" 2>&1 | grep -vE "^\[ *[0-9]+%\]" || true
cmake --build "$BUILD_DIR" -j"$(nproc)" >/dev/null   # fails the run on a build error

args=(--test-dir "$BUILD_DIR" --output-on-failure --timeout 600)
[ -n "${TEST_LABEL:-}" ] && args+=(-L "$TEST_LABEL")
[ -n "${TEST_REGEX:-}" ] && args+=(-R "$TEST_REGEX")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=0}
# The C unit tests side by side (each its own temporary directory and
# ports); then the API suites one at a time (each starts nodes and
# clusters whose failure detection a saturated machine would disturb).
rc=0
if [ -z "${TEST_LABEL:-}" ] || [ "$TEST_LABEL" = unit ]; then
	ctest "${args[@]}" -L unit -j"$(nproc)" || rc=1
fi
if [ "${TEST_LABEL:-}" != unit ]; then
	ctest "${args[@]}" -LE unit || rc=1
fi
exit $rc
