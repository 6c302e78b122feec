#!/usr/bin/env python3
"""Module fences: fails when a file in a module folder includes a header it
may not (docs/architecture.md, "Module fences").

  - a module includes headers of itself and of the modules in its USES row
    only (all of them below it in LAYERS), and of those only their public
    headers (PUBLIC), less the DENY pairs;
  - a third-party header is included only by the modules (or files) that
    own its library (THIRD_PARTY);
  - a module does not name the identifiers in IDENTS (what it reaches
    through a lower module's headers without including them).

The LAYERS, USES and THIRD_PARTY owners must match CMakeLists.txt
(SHOAL_MODULES, SHOAL_USES_<mod>, SHOAL_OWNS_<mod>): CMake links what a
module owns, this script checks that nobody else includes it.
    python3 tests/check_fences.py [ROOT]
Exit 0 when the tree keeps to the fences, 1 with one line per violation.
"""
import os
import re
import sys

# Bottom to top. A module without a folder yet (replication) is simply empty.
LAYERS = ["common", "script", "storage", "search", "proto", "replication", "coord",
          "snapshot", "node", "coordinator"]

# The modules below it each module may include and link (CMake SHOAL_USES_<mod>).
USES = {
    "common": [],
    "script": ["common"],
    "storage": ["common"],
    "search": ["common", "script", "storage"],
    "proto": ["common", "storage", "search"],
    "replication": ["common", "storage", "proto"],
    "coord": ["common"],
    "snapshot": ["common", "proto"],
    "node": ["common", "storage", "search", "proto", "replication", "coord", "snapshot"],
    "coordinator": ["common", "script", "storage", "search", "node"],
}

# The headers another module may include; the rest stay inside the folder.
# None: every header of the folder (a module being written, no list yet).
PUBLIC = {
    "common": ["cm_alloc.h", "cm_buf.h", "cm_err.h", "cm_log.h", "cm_sys.h"],
    "script": ["ps.h"],
    "storage": ["st_types.h", "st_segment.h", "st_shard.h"],
    "search": ["sr.h", "sr_agg.h", "sr_engine.h"],
    "proto": ["pr.h"],
    "replication": None,
    "coord": ["ec.h"],
    "snapshot": ["sn.h"],
    "node": ["nd.h", "nd_cluster.h", "nd_transport.h", "nd_snap.h"],
    "coordinator": ["co.h"],
}

# (module, header, why): public headers a module still may not include.
DENY = [
    ("coordinator", "storage/st_segment.h", "segments are storage's; ask node (nd_)"),
    ("coordinator", "storage/st_shard.h", "shards and readers are storage's; ask node (nd_)"),
]

# (include pattern, library as CMake names it, owners): owners are module
# folders or single files. An empty owner list: no module links it.
THIRD_PARTY = [
    (r"lmdb\.h$", "lmdb", ["storage"]),
    (r"(zstd|zdict)\.h$", "zstd", ["storage", "snapshot"]),
    (r"libstemmer\.h$", "stemmer", ["storage"]),
    (r"utf8proc\.h$", "utf8proc", ["storage"]),
    (r"xxhash\.h$", "xxhash", ["common", "storage", "search", "snapshot", "node"]),
    (r"cjson/", "cjson", ["script", "storage", "search", "coord", "snapshot", "node", "coordinator"]),
    (r"curl/", "curl", ["coord"]),
    (r"protobuf-c/", "protobuf-c", ["proto"]),
    (r"nng/", "nng", ["node/nd_transport.c"]),
    (r"microhttpd\.h$", "microhttpd", ["coordinator/co_http.c"]),
    (r"argon2\.h$", "argon2", ["coordinator/co_auth.c"]),
    (r"zlib\.h$", "zlib", ["coordinator"]),
    (r"pcre2\.h$", "pcre2", ["coordinator/co_ingest.c", "coordinator/co_grok.c"]),
    (r"(streamvbyte|roaring)", "", []),
]
# Generated protobuf code: proto/ and replication/ (which encodes its own
# typed messages: cluster state, recovery, shard events) include it.
GENERATED = [(r"\.pb-c\.h$", ["proto", "replication", "snapshot"])]

# (module, identifier pattern, why)
IDENTS = [
    ("coordinator", r"\bst_(seg|segment|reader|stored)_\w+",
     "segments and readers are storage's; ask node (nd_)"),
]

INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)
# Comments become blanks (newlines kept, so line numbers hold); string and
# character literals are kept as they are.
TOKENS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def strip_comments(text):
    def repl(m):
        s = m.group(0)
        if s.startswith("/"):
            return re.sub(r"[^\n]", " ", s)
        return s
    return TOKENS.sub(repl, text)


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def cmake_tables(root):
    """SHOAL_MODULES, SHOAL_USES_* and SHOAL_OWNS_* from CMakeLists.txt."""
    with open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8") as f:
        text = strip_cmake_comments(f.read())
    sets = {}
    for m in re.finditer(r"^\s*set\(\s*(SHOAL_\w+)((?:\s+[^)\s]+)*)\s*\)", text, re.M):
        sets[m.group(1)] = [v for v in m.group(2).split() if v != '""']
    return sets


def strip_cmake_comments(text):
    return re.sub(r"#[^\n]*", "", text)


def check_cmake(root, errors):
    sets = cmake_tables(root)
    if sets.get("SHOAL_MODULES") != LAYERS:
        errors.append("CMakeLists.txt: SHOAL_MODULES %s differs from LAYERS %s"
                      % (sets.get("SHOAL_MODULES"), LAYERS))
    for mod in LAYERS:
        got = sets.get("SHOAL_USES_" + mod)
        if got is None or sorted(got) != sorted(USES[mod]):
            errors.append("CMakeLists.txt: SHOAL_USES_%s %s differs from USES %s"
                          % (mod, got, USES[mod]))
    for _, lib, owners in THIRD_PARTY:
        if not lib:
            continue
        want = sorted({o.split("/")[0] for o in owners})
        have = sorted(mod for mod in LAYERS if lib in sets.get("SHOAL_OWNS_" + mod, []))
        if want != have:
            errors.append("CMakeLists.txt: %s is linked by %s, THIRD_PARTY says %s"
                          % (lib, have, want))


def resolve(root, rel_dir, target):
    """The tree path a quoted include names, or None when outside the modules."""
    for base in (rel_dir, ""):
        p = os.path.normpath(os.path.join(base, target))
        if os.path.exists(os.path.join(root, p)):
            return p
    p = os.path.normpath(target)  # generated, e.g. proto/shoal.pb-c.h
    return p if p.split(os.sep)[0] in LAYERS else None


def owned(owners, mod, rel):
    return any(o == mod or o == rel for o in owners)


def check_file(root, rel, mod, errors):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        text = strip_comments(f.read())
    below = LAYERS[:LAYERS.index(mod)]
    for m in INCLUDE.finditer(text):
        kind, target = m.groups()
        where = "%s:%d: includes %s%s%s" % (rel, line_of(text, m.start()), kind, target,
                                           ">" if kind == "<" else '"')
        for pat, owners in GENERATED:
            if re.search(pat, target) and not owned(owners, mod, rel):
                errors.append("%s: generated code is %s's" % (where, "/".join(owners)))
        if kind == "<":
            # unit tests (*_test.c) link every library: only module code is fenced
            for pat, lib, owners in ([] if rel.endswith("_test.c") else THIRD_PARTY):
                if re.search(pat, target) and not owned(owners, mod, rel):
                    errors.append("%s: %s is owned by %s" % (
                        where, lib or target, ", ".join(owners) or "no module (not linked)"))
            continue
        path = resolve(root, os.path.dirname(rel), target)
        if not path:
            continue
        other = path.split(os.sep)[0]
        if other not in LAYERS or other == mod:
            continue
        if any(re.search(pat, target) and owned(owners, mod, rel) for pat, owners in GENERATED):
            continue
        if other not in below:
            errors.append("%s: %s is above %s in the layering" % (where, other, mod))
            continue
        if other not in USES[mod]:
            errors.append("%s: %s does not use %s (USES)" % (where, mod, other))
            continue
        pub = PUBLIC[other]
        if pub is not None and os.path.basename(path) not in pub:
            errors.append("%s: not a public header of %s" % (where, other))
            continue
        for dmod, dhdr, why in DENY:
            if dmod == mod and path == os.path.normpath(dhdr):
                errors.append("%s: %s" % (where, why))
    for dmod, pat, why in IDENTS:
        if dmod != mod:
            continue
        for m in re.finditer(pat, text):
            errors.append("%s:%d: names %s: %s" % (rel, line_of(text, m.start()), m.group(0),
                                                   why))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(here))
    errors = []
    for mod in LAYERS:
        if any(u not in LAYERS[:LAYERS.index(mod)] for u in USES[mod]):
            errors.append("USES[%s] names a module that is not below it" % mod)
    check_cmake(root, errors)
    nfiles = 0
    for mod in LAYERS:
        d = os.path.join(root, mod)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith((".c", ".h")):
                check_file(root, mod + "/" + name, mod, errors)
                nfiles += 1
    for e in errors:
        print(e)
    if errors:
        print("check_fences: %d violation(s) in %d files" % (len(errors), nfiles))
        return 1
    print("check_fences: %d files keep to the module fences" % nfiles)
    return 0


if __name__ == "__main__":
    sys.exit(main())
