"""Runs the libFuzzer targets (tests/fuzz/run.sh) for 12 s each (eight
targets, two at a time: under a minute plus the build; the CI run's
budget, longer runs are by hand): the transport's protobuf decoders, the query DSL / q= parsers,
document parsing, analysis chains, the _bulk NDJSON parser, the segment
reader over arbitrary files, the transport message handlers and update
scripts.
Skips, saying so, when clang is missing. Any crash fails.
    SHOAL_FUZZ_SECONDS=300 python3 tests/api/test_fuzz.py
"""
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    if not shutil.which("clang"):
        print("SKIP test_fuzz: clang is not installed (apt-get install clang)", flush=True)
        print("0 passed, 0 failed")
        return 0
    secs = os.environ.get("SHOAL_FUZZ_SECONDS", "12")
    p = subprocess.run([os.path.join(ROOT, "tests", "fuzz", "run.sh"), secs], cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1800)
    out = p.stdout.decode("utf-8", "replace")
    sys.stdout.write(out)
    if p.returncode == 77:
        print("SKIP test_fuzz: clang unusable")
        return 0
    ok = out.count("\nok ") + out.startswith("ok ")
    bad = out.count("FAIL ")
    print("%d passed, %d failed" % (ok, bad + (1 if p.returncode and not bad else 0)))
    return 0 if p.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
