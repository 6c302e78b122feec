"""A linearizability check of single-document histories against a register
model (the Wing-Gong search with memoization that Elasticsearch's
LinearizabilityChecker and porcupine use), per document.

An operation is a dict: {"op": "write"|"cas"|"read", "start": t0,
"end": t1 or None, "ok": True|False|None, ...}:
  write  {"value": v}: ok True, or None when its outcome is unknown (a
         timeout, a 5xx): it may have taken effect at any point after start
  cas    {"expect": old, "value": v}: ok True (it saw old and wrote v), False
         (a version conflict: the document was not old), None unknown
  read   {"value": v or None}: ok True (a value read); unknown reads are
         dropped (they constrain nothing)
Values are unique per write, so a value stands for the version it made.
Histories are JSON-serializable so that a run can be checked again."""
import sys


class _Entry:
    __slots__ = ("op", "id", "match", "prev", "next")

    def __init__(self, op, id_):
        self.op, self.id, self.match, self.prev, self.next = op, id_, None, None, None


def _step(o, st):
    """(possible, new state) of op o on register state st."""
    kind = o["op"]
    if kind == "read":
        return st == o["value"], st
    if kind == "write":
        return True, o["value"]
    if o.get("ok") is True:  # cas that wrote
        return st == o["expect"], o["value"]
    if o.get("ok") is False:  # cas refused: the version was another
        return st != o["expect"], st
    # a cas of unknown outcome: it wrote if it could
    return True, (o["value"] if st == o["expect"] else st)


def _check_key(ops, init=None):
    """True when ops (one document) can be linearized from state init
    (porcupine's checkSingle: depth-first over which pending operation
    takes effect next, pruned by the (done set, state) pairs seen)."""
    evs = []
    for i, o in enumerate(ops):
        if o["op"] == "read" and o.get("ok") is not True:
            continue  # an unknown read constrains nothing
        # an unknown outcome may take effect at any time after its start
        end = o["end"] if o.get("ok") is not None else float("inf")
        evs.append((o["start"], 0, i))
        evs.append((end, 1, i))
    evs.sort(key=lambda e: (e[0], e[1]))
    head = _Entry(None, -1)
    last, calls = head, {}
    for _, kind, i in evs:
        e = _Entry(ops[i], i)
        if kind == 0:
            calls[i] = e
        else:
            calls[i].match = e  # a call points at its return
        e.prev, last.next = last, e
        last = e

    def lift(e):
        e.prev.next = e.next
        if e.next:
            e.next.prev = e.prev
        m = e.match
        m.prev.next = m.next
        if m.next:
            m.next.prev = m.prev

    def unlift(e):
        m = e.match
        m.prev.next = m
        if m.next:
            m.next.prev = m
        e.prev.next = e
        if e.next:
            e.next.prev = e

    seen, stack, done, state = set(), [], 0, init
    entry = head.next
    while head.next is not None:
        if entry.match is not None:  # a call
            ok, st2 = _step(entry.op, state)
            if ok:
                d2 = done | (1 << entry.id)
                if (d2, st2) not in seen:
                    seen.add((d2, st2))
                    stack.append((entry, state))
                    state, done = st2, d2
                    lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
        else:  # a return whose call cannot go first: undo the last choice
            if not stack:
                return False
            entry, state = stack.pop()
            done &= ~(1 << entry.id)
            unlift(entry)
            entry = entry.next
    return True


def check(history):
    """history: {doc id: [ops]}. Returns (ok, [doc ids that fail])."""
    bad = [k for k, ops in sorted(history.items()) if not _check_key(ops)]
    return not bad, bad


if __name__ == "__main__":
    import json
    h = json.load(open(sys.argv[1]))
    ok, bad = check(h)
    print("linearizable" if ok else "NOT linearizable: %s" % bad)
    sys.exit(0 if ok else 1)
