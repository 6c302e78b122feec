"""BM25 against Lucene 8.8 on a fixed corpus: 3,000 GCIDE entries, 84 scored
top-10 queries (term, AND, OR, phrase, sloppy phrase) through a real node's
_search, against Debian's liblucene8-java ranking the same documents. Same
ids, scores equal to 1e-5 relative (tests/bench/bm25_check.py does the work)."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import run_tests, test  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@test
def bm25_equals_lucene():
    if not shutil.which("javac") or not os.path.isdir("/usr/share/java"):
        print("SKIPPED: Java (javac) is missing, so Lucene cannot run", flush=True)
        return
    build = os.path.dirname(os.environ.get("SHOAL_BIN", os.path.join(ROOT, "build", "bin")))
    p = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tests", "bench", "bm25_check.py"),
                        "3000", "--build", build, "--tolerance", "1e-5"],
                       capture_output=True, text=True, timeout=540)
    print(p.stdout[-1500:], flush=True)
    if p.returncode != 0:
        raise AssertionError("bm25_check failed:\n%s\n%s" % (p.stdout[-3000:], p.stderr[-3000:]))
    assert "0 differ" in p.stdout, p.stdout[-500:]


if __name__ == "__main__":
    run_tests(budget_s=560)
