#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) into build-fuzz/
# and runs each for SECONDS (default 30) from its seed corpus.
#   tests/fuzz/run.sh [SECONDS]
# Targets: tests/fuzz/proto_fuzz.c (transport decoders), search/dsl_fuzz.c
# (query DSL, _search body, q= query strings, _source filters),
# storage/docparse_fuzz.c (documents, mappings, analyzers, dates),
# storage/analysis_fuzz.c (analysis settings, custom chains over any text),
# tests/fuzz/bulk_fuzz.c (_bulk NDJSON parser, in random chunkings),
# tests/fuzz/segment_fuzz.c (segment reader over arbitrary file bytes),
# tests/fuzz/handler_fuzz.c (transport message handlers: decode, then
# what the node does with it), script/ps_fuzz.c (update scripts: compile
# and run). FUZZ_TARGETS="bulk_fuzz ..." runs a subset.
# Exits nonzero on a build failure or any crash; crash inputs are left in
# build-fuzz/crashes/<target>/ (add them to tests/fuzz/corpus/<target>/
# once fixed, as regression seeds).
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-30}
# A fixed seed makes the default test run repeatable (the same inputs in
# the same order, as far as the time allows); FUZZ_SEED=0 lets libFuzzer
# pick one, for exploring.
SEED=${FUZZ_SEED:-1}
B=build-fuzz
command -v clang >/dev/null || { echo "clang not installed" >&2; exit 77; }

# The libraries, instrumented for coverage and the sanitizers.
# tests/fuzz/ignorelist.txt: known findings awaiting their owner's fix.
FLAGS="-g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined \
	-fsanitize-ignorelist=$PWD/tests/fuzz/ignorelist.txt"
cmake -S . -B "$B" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
	-DCMAKE_C_FLAGS="$FLAGS" >/dev/null
# The module libraries, top layer first, as CMake lists them (a module
# whose folder does not exist yet has no library).
MODS=$(tr ';' ' ' <"$B/shoal_modules.txt")
cmake --build "$B" -j"$(nproc)" --target $MODS \
	>"$B/build.log" 2>&1 || { tail -30 "$B/build.log"; exit 1; }
LIBS="$(for m in $MODS; do printf '%s ' "$B/lib$m.a"; done) \
	$(pkg-config --libs libcjson libzstd lmdb libutf8proc libxxhash libprotobuf-c zlib libmicrohttpd libcurl libpcre2-8) \
	$(pkg-config --libs libargon2 2>/dev/null || true) -lnng -lstemmer -lm -lpthread"

build() { # name source...
	local name=$1
	shift
	clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
		-I. -I"$B" -I"$B/proto" "$@" $LIBS -o "$B/$name"
}
# The targets link at once (each is one compile and a large static link).
pids=()
for spec in "proto_fuzz tests/fuzz/proto_fuzz.c" "dsl_fuzz search/dsl_fuzz.c" \
	"docparse_fuzz storage/docparse_fuzz.c" "analysis_fuzz storage/analysis_fuzz.c" \
	"bulk_fuzz tests/fuzz/bulk_fuzz.c" "segment_fuzz tests/fuzz/segment_fuzz.c" \
	"handler_fuzz tests/fuzz/handler_fuzz.c" "ps_fuzz script/ps_fuzz.c"; do
	# shellcheck disable=SC2086
	build $spec &
	pids+=($!)
done
for p in "${pids[@]}"; do
	wait "$p" || { echo "a fuzz target did not build" >&2; exit 1; }
done

fail=0
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
# Scratch space for targets that write files (segment_fuzz, handler_fuzz):
# tmpfs when there is one; removed here, since libFuzzer leaves without
# running atexit handlers.
SHOAL_FUZZ_TMP=$(mktemp -d "$( [ -w /dev/shm ] && echo /dev/shm || echo /tmp )/shoal-fuzz.XXXXXX")
export SHOAL_FUZZ_TMP
trap 'rm -rf "$SHOAL_FUZZ_TMP"' EXIT
# One target per core at a time (libFuzzer runs one thread); results are
# printed in the targets' order once all ran.
run_one() { # target
	local t=$1 c=tests/fuzz/corpus/${1%_fuzz} work=$B/corpus/${1%_fuzz}
	mkdir -p "$c" "$work" "$B/crashes/$t"
	if "$B/$t" -seed="$SEED" -max_total_time="$SECS" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
		-artifact_prefix="$B/crashes/$t/" -print_final_stats=1 "$work" "$c" \
		>"$B/$t.log" 2>&1; then
		echo "ok   $t: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$B/$t.log" | grep -o '[0-9]*$') inputs in ${SECS}s" >"$B/$t.result"
	else
		{
			echo "FAIL $t (log $B/$t.log, inputs in $B/crashes/$t/)"
			grep -m5 -E 'ERROR|runtime error|SUMMARY' "$B/$t.log" || true
		} >"$B/$t.result"
	fi
}
TARGETS=${FUZZ_TARGETS:-proto_fuzz dsl_fuzz docparse_fuzz analysis_fuzz bulk_fuzz segment_fuzz handler_fuzz ps_fuzz}
JOBS=$(nproc)
for t in $TARGETS; do
	rm -f "$B/$t.result"
	while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do
		wait -n || true
	done
	run_one "$t" &
done
wait
for t in $TARGETS; do
	if [ -f "$B/$t.result" ]; then
		cat "$B/$t.result"
		grep -q '^FAIL' "$B/$t.result" && fail=1
	else
		echo "FAIL $t (no result)"
		fail=1
	fi
done
exit $fail
