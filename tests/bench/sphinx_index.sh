#!/bin/bash
# Sphinx 2.2 `indexer` over a W2/W3 corpus (Debian sphinxsearch): one plain
# index (Sphinx writes a single segment; there is no merge step), same
# documents: title/body as full-text fields (no morphology, min_word_len 1),
# keyword fields as string attributes, price_i/sort_i as uint, date_dt as a
# timestamp (a corpus without text gets its id as the one full-text field
# Sphinx requires). The NDJSON -> TSV conversion runs first and is not timed; the
# indexer reads the TSV through `tsvpipe_command = cat FILE`.
# Usage: sphinx_index.sh DOCS [OUTDIR]     prints one JSON line
set -euo pipefail
DOCS=$1
OUT=${2:-$(mktemp -d /tmp/shoal-sphinx-idx.XXXXXX)}
mkdir -p "$OUT/data"
PY=/usr/bin/python3
command -v indexer >/dev/null || { echo "sphinx_index.sh: indexer missing: apt-get install sphinxsearch" >&2; exit 2; }

# columns: id, then the fields and attributes in the order the config declares
"$PY" - "$DOCS" "$OUT" <<'EOF'
import calendar, json, re, sys
docs, out = sys.argv[1], sys.argv[2]
first = json.loads(open(docs).readline())
text = [f for f in ("title", "body") if f in first]
# Sphinx needs one full-text field: a W2 corpus has none, so its id is one
idfield = not text
strs = [k for k in first if k not in text and k != "id" and isinstance(first[k], str) and k != "date_dt"]
ints = [k for k in first if isinstance(first[k], int)]
dates = [k for k in first if k == "date_dt"]
D = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)Z")
with open(out + "/docs.tsv", "w") as f:
    for line in open(docs):
        d = json.loads(line)
        row = [str(int(d["id"]))] + ([d["id"]] if idfield else []) + [d[k] for k in text] + [d[k] for k in strs] + [str(d[k]) for k in ints]
        row += [str(calendar.timegm(tuple(int(x) for x in D.fullmatch(d[k]).groups()))) for k in dates]
        f.write("\t".join(x.replace("\t", " ") for x in row) + "\n")
with open(out + "/columns", "w") as f:
    f.write("\n".join(["field " + k for k in (["idtext"] if idfield else text)] + ["attr_string " + k for k in strs] +
                      ["attr_uint " + k for k in ints] + ["attr_timestamp " + k for k in dates]) + "\n")
EOF
{
  echo "source src"
  echo "{"
  echo "	type = tsvpipe"
  echo "	tsvpipe_command = cat $OUT/docs.tsv"
  while read -r kind name; do
    case $kind in
      field) echo "	tsvpipe_field = $name" ;;
      *) echo "	tsvpipe_$kind = $name" ;;
    esac
  done < "$OUT/columns"
  echo "}"
  cat <<EOF
index idx
{
	source = src
	path = $OUT/data/idx
	docinfo = extern
	dict = keywords
	min_word_len = 1
	morphology = none
}
indexer
{
	mem_limit = 256M
}
EOF
} > "$OUT/sphinx.conf"
N=$(wc -l < "$OUT/docs.tsv")
/usr/bin/time -f '%e %U %S' -o "$OUT/time" indexer --config "$OUT/sphinx.conf" --all --quiet > "$OUT/indexer.log" 2>&1 \
  || { cat "$OUT/indexer.log" >&2; exit 1; }
read -r wall user sys < "$OUT/time"
bytes=$(du -sb "$OUT/data" | cut -f1)
ver=$( (indexer 2>&1 || true) | head -1 | awk '{print $2}')
"$PY" -c "
import json
w,c=$wall,$user+$sys
print(json.dumps({'engine':'sphinx','version':'$ver','docs':$N,'searchable_s':w,'force_merge_s':0.0,'total_s':w,
 'cpu_s':round(c,3),'docs_per_cpu_s':round($N/c) if c else None,'merge_busy_threads':None,'segments':1,'index_bytes':$bytes}))"
[ -n "${2:-}" ] || rm -rf "$OUT"
