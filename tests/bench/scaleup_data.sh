#!/bin/bash
# The data tests/bench/scaleup.sh reads, written once where Python and
# dict-gcide exist (bundle.sh calls this), so that the machine that measures
# needs neither:
#   gcide.ndjson.gz   every GCIDE entry as {"id","title","body"} (gen_w3.py,
#                     seed 42, the W2 fields dropped), one document a line
#   gcide_map.json    its mapping (dynamic strict: id keyword, title/body text)
#   w1_bulk.ndjson.gz the W1 accounts x20 as a _bulk body (w1_data.py)
#   w1_queries.ndjson the seven W1 queries with their exact counts (loadgen)
#   MANIFEST          document counts and how the files were made
#
# Usage: tests/bench/scaleup_data.sh OUTDIR
# Environment: GCIDE_NDJSON=FILE takes an already stripped {"id","title","body"}
#   corpus instead of running gen_w3.py (which takes a few minutes);
#   GCIDE_DOCS (126236) documents to ask gen_w3.py for.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="${1:?usage: scaleup_data.sh OUTDIR}"
PY="$(command -v python3 || true)"
[ -n "$PY" ] || { echo "scaleup_data.sh: needs python3" >&2; exit 1; }
mkdir -p "$OUT"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal-scaleup-data.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# ---- W1: the same documents and queries as w1.sh
"$PY" "$HERE/w1_data.py" "$ROOT/cluster-scripts/sample/accounts-es.ndjson" "$TMP/w1" >/dev/null
gzip -9 -c "$TMP/w1/bulk.ndjson" > "$OUT/w1_bulk.ndjson.gz"
cp "$TMP/w1/q_http.ndjson" "$OUT/w1_queries.ndjson"
w1_docs=$(grep -c '"_index"' "$TMP/w1/bulk.ndjson")

# ---- GCIDE title/body
if [ -n "${GCIDE_NDJSON:-}" ]; then
  src="$GCIDE_NDJSON"; how="taken from $GCIDE_NDJSON"
else
  n="${GCIDE_DOCS:-126236}"
  "$PY" "$HERE/gen_w3.py" "$n" --seed 42 --out "$TMP/w3.ndjson"
  "$PY" - "$TMP/w3.ndjson" "$TMP/gc.ndjson" <<'EOF'
import json, sys
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as o:
    for line in f:
        d = json.loads(line)
        o.write(json.dumps({"id": str(d["id"]), "title": d["title"], "body": d["body"]},
                           separators=(",", ":")) + "\n")
EOF
  src="$TMP/gc.ndjson"; how="tests/bench/gen_w3.py $n --seed 42, W2 fields dropped"
fi
# ids must be where scaleup.sh's rewriting expects them: the first member
if ! head -n 1 "$src" | grep -q '^{"id": \{0,1\}"'; then
  echo "scaleup_data.sh: $src: lines must start with {\"id\":\"...\"" >&2; exit 1
fi
gzip -9 -c "$src" > "$OUT/gcide.ndjson.gz"
gc_docs=$(wc -l < "$src")
printf '%s\n' '{"dynamic":"strict","properties":{"id":{"type":"keyword"},"title":{"type":"text"},"body":{"type":"text"}}}' \
  > "$OUT/gcide_map.json"

{
  echo "gcide_docs: $gc_docs"
  echo "gcide_source: $how"
  echo "w1_docs: $w1_docs"
  echo "w1_source: tests/bench/w1_data.py cluster-scripts/sample/accounts-es.ndjson (x20, distinct ids)"
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "made: $(date -u '+%Y-%m-%d %H:%M UTC')"
} > "$OUT/MANIFEST"
echo "scaleup_data.sh: $gc_docs GCIDE documents, $w1_docs W1 documents in $OUT"
