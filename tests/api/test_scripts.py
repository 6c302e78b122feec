"""cluster-scripts/local-cluster.sh itself: `up --nodes 3` in a temporary
data directory on free ports with the already built binary (SHOAL_BIN), then
20 rounds of `kill NODE` + `restart NODE` for each of the 3 nodes: every
command exits 0, searches through the other nodes stay complete while a node
is down, the cluster is green after each restart; then `down`.

Found: `restart NODE` failed at random with "no node NODE in
data/cluster.json" (`cluster_nodes | grep -qx` under pipefail: grep -q exits
at the first match and the python3 that lists the nodes dies of SIGPIPE)."""
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import ROOT, eq, run_tests, shoal_bin, test  # noqa: E402

SCRIPT = os.path.join(ROOT, "cluster-scripts", "local-cluster.sh")
TMP = tempfile.mkdtemp(prefix="shoal-scripts-test-")
DATA = os.path.join(TMP, "data")
NAMES = ["node-1", "node-2", "node-3"]
ROUNDS = int(os.environ.get("SHOAL_SCRIPTS_ROUNDS", "20"))
SAMPLE_DOCS = 1000


def ports_free(base):
    for p in [base + i for i in range(3)] + [base + 100 + i for i in range(3)] + \
            [base + 200, base + 201]:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the nodes listen
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            return False
        finally:
            s.close()
    return True


def pick_base():
    """HTTP base..base+2 and transport base+100..base+102, below the
    ephemeral range and away from a user's cluster on 9200."""
    rnd = random.Random(os.getpid() ^ int(time.time()))
    for _ in range(500):
        base = rnd.randrange(20000, 32000)
        if ports_free(base):
            return base
    raise RuntimeError("no free port range")


BASE = pick_base()
ENV = dict(os.environ, SHOAL_DATA_DIR=DATA, SHOAL_BASE_PORT=str(BASE),
           SHOAL_ETCD_PORT=str(BASE + 200),
           SHOAL_BIN=os.path.dirname(shoal_bin()),
           SHOAL_NODE_ARGS="-E cluster.primary_failover_timeout=3s")


def script(*args, timeout=180):
    """Runs local-cluster.sh; returns (exit code, output)."""
    p = subprocess.run(["bash", SCRIPT] + list(args), env=ENV, cwd=ROOT, timeout=timeout,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def get(port, path, timeout=30):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path),
                                    timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def port(name):
    return BASE + NAMES.index(name)


def pids():
    out = {}
    for n in NAMES:
        try:
            with open(os.path.join(DATA, n, "shoal.pid")) as f:
                out[n] = int(f.read().strip())
        except (OSError, ValueError):
            pass
    return out


PARTIAL = []  # (node, seconds until complete) when the first answer was partial


def complete_count(via, within=10.0):
    """A search of the sample through node `via` answers with all documents
    and no failed shard, at once or, right after a kill, within `within` s
    (PARTIAL records the waits)."""
    t0 = time.time()
    first = True
    while True:
        st, b = get(port(via), "/accounts/_search?size=0&track_total_hits=true")
        got = (st, b and b["hits"]["total"]["value"], b and b["_shards"]["failed"])
        if got == (200, SAMPLE_DOCS, 0):
            if not first:
                PARTIAL.append((via, time.time() - t0))
            return
        first = False
        if time.time() - t0 > within:
            raise AssertionError("search via %s: no complete answer within %.0f s: %s" %
                                 (via, within, got))
        time.sleep(0.2)


@test
def up_kill_restart_down():
    t_all = time.time()
    rc, out = script("up", "--nodes", "3")
    assert rc == 0, "up exited %d:\n%s" % (rc, out[-3000:])
    assert os.path.exists(os.path.join(DATA, "cluster.json")), "no cluster file in " + DATA
    st, b = get(port("node-1"), "/_cluster/health")
    eq((st, b["status"], b["number_of_nodes"]), (200, "green", 3), "health after up")
    complete_count("node-3")

    rc, out = script("restart", "node-9")
    assert rc != 0 and "no node node-9" in out, "restart of an unknown node: %d %s" % (rc, out)

    greens, restarts = [], 0
    for r in range(ROUNDS):
        for name in NAMES:
            before = pids().get(name)
            rc, out = script("kill", name)
            assert rc == 0, "round %d: kill %s exited %d:\n%s" % (r + 1, name, rc, out[-2000:])
            other = NAMES[(NAMES.index(name) + 1) % 3]
            complete_count(other)  # searches go on from the other copies
            t0 = time.time()
            rc, out = script("restart", name)
            greens.append(time.time() - t0)
            assert rc == 0, "round %d: restart %s exited %d:\n%s" % (r + 1, name, rc,
                                                                      out[-3000:])
            restarts += 1
            after = pids().get(name)
            assert after and after != before, "round %d: %s pid %s -> %s" % (
                r + 1, name, before, after)
            # the script waited for the master's view; the other nodes follow
            st, b = get(port(other), "/_cluster/health?wait_for_status=green&wait_for_nodes=3"
                        "&timeout=20s")
            eq((st, b["status"], b["number_of_nodes"]), (200, "green", 3),
               "round %d: health on %s after restarting %s" % (r + 1, other, name))
            complete_count(name)

    running = pids()
    rc, out = script("down")
    assert rc == 0, "down exited %d:\n%s" % (rc, out[-2000:])
    assert "did not stop" not in out, "down had to kill a node:\n" + out
    for n, pid in running.items():
        try:
            os.kill(pid, 0)
            raise AssertionError("%s (pid %d) still runs after down" % (n, pid))
        except ProcessLookupError:
            pass
    print("rounds %d, restarts %d, seconds per restart to green: max %.1f median %.1f; "
          "searches right after a kill that were partial first: %d (complete after max %.1f s); "
          "whole test %.0f s" % (ROUNDS, restarts, max(greens), statistics.median(greens),
                                 len(PARTIAL), max([t for _, t in PARTIAL] or [0]),
                                 time.time() - t_all), flush=True)


def teardown():
    # whatever a failed run left running
    for pid in pids().values():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    shutil.rmtree(TMP, ignore_errors=True)
    return 0


if __name__ == "__main__":
    run_tests(budget_s=500, teardown=teardown)
