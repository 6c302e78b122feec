"""The fault scenarios with every node and etcd member in its own network
namespace (tests/faults/faults.py), the short run: P1 (the master cut off
from every node and from etcd), P2 (from the nodes, not etcd), P4 (a
one-way cut), P6 (20% loss), 4 s of fault each under CAS, write and GET
clients and a bulk writer. Every acknowledged document must be there, none
that was never sent, and every register history linearizable.
Skips, saying so, where namespaces or iptables cannot be used (not root).
The long randomized run: tests/faults/run.sh --seed S --secs N."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "faults"))
import netns  # noqa: E402


def main():
    why = netns.usable()
    if why:
        print("SKIP test_faults: %s" % why, flush=True)
        print("0 passed, 0 failed")
        return 0
    env = dict(os.environ)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "faults", "faults.py"),
                        "--secs", "4", "--scenarios", "P1,P2,P4,P6"], cwd=ROOT, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=540)
    out = p.stdout.decode("utf-8", "replace")
    sys.stdout.write(out)
    passed = sum(1 for line in out.splitlines() if line.startswith("P") and
                 " lost 0 unknown 0;" in line and " linearizable;" in line)
    print("%d passed, %d failed" % (passed, 0 if p.returncode == 0 else 4 - passed))
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
