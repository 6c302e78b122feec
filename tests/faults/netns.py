"""Test hosts in network namespaces (issue #29): every host (a shoal node,
an etcd member) gets its own namespace with its own address on a bridge in
the root namespace, where the test's clients run. Links are cut with
iptables DROP rules inside the namespaces: symmetric or one way, between
two hosts, a host from everyone, random loss with `-m statistic`.
Everything made here is removed by close(), also when a test fails or is
interrupted (atexit and SIGTERM/SIGINT), and leftovers of a run that was
killed are removed by the next (their names carry the owning pid).

Needs root, iproute2 and iptables (Debian packages)."""
import atexit
import os
import shutil
import signal
import subprocess
import time

PREFIX = "shf"  # every namespace, veth and bridge made here starts with it


def sh(*argv, check=True, quiet=False):
    r = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(argv), r.stderr.decode().strip()))
    return r.stdout.decode()


def usable():
    """None when namespaces and iptables can be used here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "iptables"):
        if not shutil.which(tool):
            return "%s is not installed" % tool
    name = "%s-probe%d" % (PREFIX, os.getpid())
    try:
        sh("ip", "netns", "add", name)
        sh("ip", "netns", "exec", name, "iptables", "-L", "-n")
    except RuntimeError as e:
        return "network namespaces unusable: %s" % e
    finally:
        sh("ip", "netns", "del", name, check=False)
    return None


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def cleanup_stale():
    """Removes what runs that no longer live left behind."""
    for line in sh("ip", "netns", "list", check=False).splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(PREFIX + "-"):
            owner = name[len(PREFIX) + 1:].split("-")[0]
            if owner.isdigit() and not _pid_alive(int(owner)):
                for pid in sh("ip", "netns", "pids", name, check=False).split():
                    sh("kill", "-9", pid, check=False)
                sh("ip", "netns", "del", name, check=False)
    for line in sh("ip", "-o", "link", "show", check=False).splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            dev = parts[1].strip().split("@")[0]
            if dev.startswith(PREFIX) and dev[len(PREFIX):].split("x")[0].isdigit():
                owner = int(dev[len(PREFIX):].split("x")[0])
                if not _pid_alive(owner):
                    sh("ip", "link", "del", dev, check=False)


class Net:
    """A bridge with hosts on it. host(name) -> its address."""

    def __init__(self):
        cleanup_stale()
        self.pid = os.getpid()
        # one /24 per run, out of the way of the machine's own networks
        self.net = "10.%d.%d" % (180 + self.pid % 60, (self.pid // 60) % 250 + 1)
        self.bridge = "%s%dxb" % (PREFIX, self.pid)
        self.hosts = {}  # name -> (netns, address)
        self.procs = []
        self.closed = False
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", "%s.254/24" % self.net, "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        atexit.register(self.close)
        for sig in (signal.SIGTERM, signal.SIGINT):
            prev = signal.getsignal(sig)

            def handler(signum, frame, prev=prev):
                self.close()
                if callable(prev):
                    prev(signum, frame)
                raise SystemExit(128 + signum)
            signal.signal(sig, handler)

    @property
    def client(self):
        """The root namespace's address on the bridge: where clients run."""
        return "%s.254" % self.net

    def host(self, name):
        if name in self.hosts:
            return self.hosts[name][1]
        i = len(self.hosts) + 1
        ns = "%s-%d-%s" % (PREFIX, self.pid, name)
        outer, inner = "%s%dx%d" % (PREFIX, self.pid, i), "eth0"
        addr = "%s.%d" % (self.net, i)
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns)
        sh("ip", "link", "set", outer, "master", self.bridge)
        sh("ip", "link", "set", outer, "up")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", addr + "/24", "dev", inner)
        sh("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        self.hosts[name] = (ns, addr)
        return addr

    def popen(self, name, argv, **kw):
        """A process inside host name's namespace (killed by close())."""
        p = subprocess.Popen(["ip", "netns", "exec", self.hosts[name][0]] + list(argv), **kw)
        self.procs.append(p)
        return p

    def _ipt(self, name, *rule):
        sh("ip", "netns", "exec", self.hosts[name][0], "iptables", *rule)

    def cut(self, a, b, oneway=False, reset=False):
        """a stops hearing from and reaching b. oneway: a cannot open a
        connection to b, b still opens them to a (TCP needs both
        directions, so the one-way fault drops a's new connections to b;
        what b opens keeps flowing). reset: TCP between them is answered
        with resets instead of dropped (a host firewalled with REJECT:
        connections reset, new ones refused)."""
        ab = self.hosts[b][1]
        if oneway:
            self._ipt(a, "-A", "OUTPUT", "-d", ab, "-m", "conntrack", "--ctstate", "NEW",
                      "-j", "DROP")
            return
        aa = self.hosts[a][1]
        if reset:
            # on receipt only, and never a reset itself: a reset made in
            # OUTPUT, or one met by a rule on its way back, never arrives
            for x, y in ((a, ab), (b, aa)):
                self._ipt(x, "-A", "INPUT", "-s", y, "-p", "tcp", "!", "--tcp-flags", "RST",
                          "RST", "-j", "REJECT", "--reject-with", "tcp-reset")
            return
        self._ipt(a, "-A", "OUTPUT", "-d", ab, "-j", "DROP")
        self._ipt(a, "-A", "INPUT", "-s", ab, "-j", "DROP")
        self._ipt(b, "-A", "OUTPUT", "-d", aa, "-j", "DROP")
        self._ipt(b, "-A", "INPUT", "-s", aa, "-j", "DROP")

    def isolate(self, a, from_=None, reset=False):
        """a cut from every other host (or those in from_); the clients in
        the root namespace still reach it."""
        for b in list(self.hosts):
            if b != a and (from_ is None or b in from_):
                self.cut(a, b, reset=reset)

    def loss(self, name, probability):
        """Random loss of host name's packets, both ways."""
        for chain in ("INPUT", "OUTPUT"):
            self._ipt(name, "-A", chain, "-m", "statistic", "--mode", "random",
                      "--probability", "%.3f" % probability, "-j", "DROP")

    def heal(self):
        for name in self.hosts:
            self._ipt(name, "-F")

    def close(self):
        if self.closed:
            return
        self.closed = True
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for ns, _ in self.hosts.values():
            # what a process started inside may have left running
            for pid in sh("ip", "netns", "pids", ns, check=False).split():
                sh("kill", "-9", pid, check=False)
            sh("ip", "netns", "del", ns, check=False)
        time.sleep(0.1)
        for dev in sh("ip", "-o", "link", "show", check=False).split("\n"):
            parts = dev.split(":")
            if len(parts) > 1:
                d = parts[1].strip().split("@")[0]
                if d.startswith("%s%dx" % (PREFIX, self.pid)):
                    sh("ip", "link", "del", d, check=False)
        sh("ip", "link", "del", self.bridge, check=False)
