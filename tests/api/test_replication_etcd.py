"""The replication matrix R0-R8 (test_replication.py) on the live cluster:
the same rows with membership, election and the cluster state on a real
etcd (SHOAL_REPL_ETCD=1; lease TTL = the failover timeout). Each node's
cluster file names etcd and keeps the proxied "connect" of the others."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ["SHOAL_REPL_ETCD"] = "1"
os.execv(sys.executable, [sys.executable, os.path.join(HERE, "test_replication.py")] + sys.argv[1:])
