"""Analysis (issue 13): `_analyze` with and without an index, custom
analyzers, tokenizers, filters, char filters and normalizers from index
settings, on a solo node and a 3-node static cluster (every node answers
with the index's analyzers, also after a restart). Expectations are worked
out by hand from Elasticsearch's documented behaviour: token lists with
offsets (in UTF-16 units), types and positions, stop-word gaps that phrase
queries respect, synonyms at one position, normalized keyword terms in
term queries and terms aggregations, and ES's error messages."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import ClusterNode, Node, cluster_file, eq, error_is, run_tests, test  # noqa: E402

TMP = tempfile.mkdtemp(prefix="shoal-analysis-test-")
NAMES = ["node-1", "node-2", "node-3"]
SOLO = None
CLUSTER = {}


def solo():
    global SOLO
    if SOLO is None:
        SOLO = Node()
    return SOLO


def cluster():
    if not CLUSTER:
        cfile = os.path.join(TMP, "cluster.json")
        ports = cluster_file(cfile, [(n, None) for n in NAMES])
        for n in NAMES:
            d = os.path.join(TMP, n)
            os.makedirs(d, exist_ok=True)
            CLUSTER[n] = ClusterNode(cfile, n, ports[n][0], data=d)
        for n in NAMES:
            wait_nodes(CLUSTER[n])
    return CLUSTER


def wait_nodes(n):
    st, b = n.req("GET", "/_cluster/health?wait_for_nodes=3&timeout=60s", timeout=80)
    eq((st, b.get("number_of_nodes")), (200, 3), "3 nodes seen")


def analyze(n, body, index=None):
    st, b = n.req("POST", ("/%s/_analyze" % index) if index else "/_analyze", body)
    eq(st, 200, "analyze %s: %s" % (body, b))
    return b["tokens"]


def toks(tokens, keys=("token",)):
    return [tuple(t[k] for k in keys) if len(keys) > 1 else t[keys[0]] for t in tokens]


FULL = ("token", "start_offset", "end_offset", "type", "position")

SETTINGS = {
    "number_of_shards": 2,
    "number_of_replicas": 0,
    "analysis": {
        "char_filter": {"amp": {"type": "mapping", "mappings": ["& => and"]}},
        "filter": {
            "my_syn": {"type": "synonym_graph",
                       "synonyms": ["laptop, notebook", "tv => television"]},
            "en_stop": {"type": "stop", "stopwords": "_english_"},
            "en_stem": {"type": "stemmer", "language": "english"},
        },
        "tokenizer": {"ac": {"type": "edge_ngram", "min_gram": 2, "max_gram": 8,
                             "token_chars": ["letter", "digit"]}},
        "analyzer": {
            "body_an": {"type": "custom", "char_filter": ["html_strip", "amp"],
                        "tokenizer": "standard",
                        "filter": ["lowercase", "asciifolding", "en_stop", "my_syn", "en_stem"]},
            "ac_an": {"tokenizer": "ac", "filter": ["lowercase"]},
            "ac_search": {"tokenizer": "lowercase"},
            "gadget_q": {"tokenizer": "standard", "filter": [
                "lowercase", {"type": "synonym", "synonyms": ["gadget => laptop"]}]},
        },
        "normalizer": {"tagnorm": {"type": "custom", "filter": ["lowercase", "asciifolding"]}},
    },
}
MAPPINGS = {"properties": {
    "title": {"type": "text", "analyzer": "body_an",
              "fields": {"folded": {"type": "keyword", "normalizer": "tagnorm"}}},
    "suggest": {"type": "text", "analyzer": "ac_an", "search_analyzer": "ac_search"},
    "tag": {"type": "keyword", "normalizer": "tagnorm"},
}}
DOCS = [
    {"title": "<b>Cheap</b> Laptops & Tablets", "suggest": "Laptops", "tag": "Électronique"},
    {"title": "The running of the notebook computers", "suggest": "Notebook",
     "tag": "electronique"},
    {"title": "A TV for the kitchen", "suggest": "Kitchen TV", "tag": "Maison"},
    {"title": "Cafés and restaurants", "suggest": "Cafés", "tag": "MAISON"},
]


def make_books(n, name, replicas=0):
    settings = dict(SETTINGS, number_of_replicas=replicas)
    st, b = n.req("PUT", "/" + name, {"settings": settings, "mappings": MAPPINGS})
    eq(st, 200, "create %s: %s" % (name, b))
    lines = []
    for i, d in enumerate(DOCS):
        lines += [{"index": {"_index": name, "_id": str(i + 1)}}, d]
    st, b = n.bulk(lines, params="?refresh=true")
    eq((st, b.get("errors")), (200, False), "bulk: %s" % b)


def ids(n, index, query, extra=None):
    body = {"query": query, "size": 20}
    body.update(extra or {})
    st, b = n.req("POST", "/%s/_search" % index, body)
    eq(st, 200, "search %s: %s" % (query, b))
    return sorted(h["_id"] for h in b["hits"]["hits"]), b


def check_books(n, index, label):
    """What ES finds in the books index, asked through node n."""
    a = analyze(n, {"analyzer": "body_an", "text": "<b>Cheap</b> Laptops & TV"}, index)
    # html_strip keeps offsets on the source; "&" maps to the stop word "and" (a gap);
    # tv => television replaces, typed SYNONYM, then stems
    eq(toks(a, FULL), [("cheap", 3, 8, "<ALPHANUM>", 0), ("laptop", 13, 20, "<ALPHANUM>", 1),
                       ("televis", 23, 25, "SYNONYM", 3)], label + " body_an")
    a = analyze(n, {"field": "tag", "text": "Électronique"}, index)
    eq(toks(a, FULL), [("electronique", 0, 12, "word", 0)], label + " keyword normalizer")
    a = analyze(n, {"field": "suggest", "text": "Lap1"}, index)
    eq(toks(a), ["la", "lap", "lap1"], label + " field analyzer (index side)")
    q = lambda query: ids(n, index, query)[0]  # noqa: E731
    eq(q({"match": {"title": "laptop"}}), ["1", "2"], label + " synonyms both ways")
    # the synonym filter runs before the stemmer: "notebooks" is no rule's word
    eq(q({"match": {"title": "notebooks"}}), ["2"], label + " synonyms before stemming")
    eq(q({"match": {"title": "television"}}), ["3"], label + " tv => television")
    eq(q({"match": {"title": {"query": "laptop tablets", "operator": "and"}}}), ["1"],
       label + " operator and with a synonym")
    eq(q({"match_phrase": {"title": "cheap laptops and tablets"}}), ["1"],
       label + " phrase over a stop gap")
    eq(q({"match_phrase": {"title": "cheap laptops tablets"}}), [],
       label + " the gap is a position")
    eq(q({"match_phrase": {"title": "running of the notebook"}}), ["2"], label + " gaps of 2")
    eq(q({"match_phrase": {"title": "running notebook"}}), [], label + " no phrase w/o gaps")
    eq(q({"match_phrase": {"title": "laptop computers"}}), ["2"],
       label + " phrase through a synonym position")
    eq(q({"match": {"title": "cafe"}}), ["4"], label + " asciifolding")
    eq(q({"match": {"title": "b"}}), [], label + " html tags are not text")
    eq(q({"match": {"suggest": "kit"}}), ["3"], label + " edge ngram prefix")
    eq(q({"match": {"suggest": "NOTE"}}), ["2"], label + " search_analyzer lowercases")
    eq(q({"match": {"suggest": "notebooks"}}), [], label + " search side is not ngrammed")
    eq(q({"term": {"tag": "ÉLECTRONIQUE"}}), ["1", "2"], label + " term normalized")
    eq(q({"terms": {"tag": ["Maison"]}}), ["3", "4"], label + " terms normalized")
    eq(q({"term": {"title.folded": "cafés AND RESTAURANTS"}}), ["4"],
       label + " normalizer on a multi-field")
    _, b = ids(n, index, {"match_all": {}}, {"aggs": {"t": {"terms": {"field": "tag"}}}})
    eq([(x["key"], x["doc_count"]) for x in b["aggregations"]["t"]["buckets"]],
       [("electronique", 2), ("maison", 2)], label + " terms agg sees normalized values")
    _, b = ids(n, index, {"match": {"title": "laptops"}},
               {"highlight": {"fields": {"title": {}}}})
    hl = {h["_id"]: h.get("highlight", {}).get("title") for h in b["hits"]["hits"]}
    eq(hl.get("1"), ["<b>Cheap</b> <em>Laptops</em> & Tablets"], label + " highlight offsets")
    # a query-time custom analyzer, for the query and for the highlighter
    _, b = ids(n, index, {"match": {"title": {"query": "gadget", "analyzer": "gadget_q"}}},
               {"highlight": {"fields": {"title": {}}}})
    hl = {h["_id"]: h.get("highlight", {}).get("title") for h in b["hits"]["hits"]}
    eq(sorted(hl), ["1", "2"], label + " query analyzer by name")
    eq(hl["1"], ["<b>Cheap</b> <em>Laptops</em> & Tablets"], label + " highlight, query analyzer")


@test
def analyze_builtin_and_inline():
    n = solo()
    a = analyze(n, {"analyzer": "standard", "text": "The 2 QUICK Brown-Foxes jumped"})
    eq(toks(a, FULL), [("the", 0, 3, "<ALPHANUM>", 0), ("2", 4, 5, "<NUM>", 1),
                       ("quick", 6, 11, "<ALPHANUM>", 2), ("brown", 12, 17, "<ALPHANUM>", 3),
                       ("foxes", 18, 23, "<ALPHANUM>", 4), ("jumped", 24, 30, "<ALPHANUM>", 5)],
       "standard")
    a = analyze(n, {"analyzer": "whitespace", "text": "Brown-Foxes jumped"})
    eq(toks(a, FULL), [("Brown-Foxes", 0, 11, "word", 0), ("jumped", 12, 18, "word", 1)],
       "whitespace analyzer")
    a = analyze(n, {"tokenizer": "keyword", "filter": ["lowercase"], "text": "New York"})
    eq(toks(a), ["new york"], "keyword + lowercase")
    a = analyze(n, {"tokenizer": "standard", "filter": ["lowercase", "stop"],
                    "text": "a quick fox jumps over the lazy dog"})
    eq(toks(a, ("token", "position")), [("quick", 1), ("fox", 2), ("jumps", 3), ("over", 4),
                                        ("lazy", 6), ("dog", 7)], "stop gaps")
    a = analyze(n, {"tokenizer": "standard", "filter": [
        {"type": "asciifolding", "preserve_original": True}], "text": "açaí à la carte"})
    eq(toks(a, ("token", "start_offset", "end_offset", "position")),
       [("acai", 0, 4, 0), ("açaí", 0, 4, 0), ("a", 5, 6, 1), ("à", 5, 6, 1), ("la", 7, 9, 2),
        ("carte", 10, 15, 3)], "inline filter, UTF-16 offsets")
    a = analyze(n, {"tokenizer": {"type": "edge_ngram", "min_gram": 2, "max_gram": 10,
                                  "token_chars": ["letter", "digit"]},
                    "text": "2 Quick Foxes."})
    eq(toks(a), ["Qu", "Qui", "Quic", "Quick", "Fo", "Fox", "Foxe", "Foxes"], "edge_ngram")
    a = analyze(n, {"tokenizer": "ngram", "text": "Quick"})
    eq(toks(a, ("token", "position")), [("Q", 0), ("Qu", 1), ("u", 2), ("ui", 3), ("i", 4),
                                        ("ic", 5), ("c", 6), ("ck", 7), ("k", 8)], "ngram")
    a = analyze(n, {"tokenizer": "keyword", "char_filter": ["html_strip"],
                    "text": "<p>I&apos;m so <b>happy</b>!</p>"})
    eq(toks(a, ("token", "start_offset", "end_offset")), [("\nI'm so happy!\n", 0, 32)],
       "html_strip")
    a = analyze(n, {"tokenizer": "standard", "char_filter": [
        {"type": "pattern_replace", "pattern": "(\\d+)-", "replacement": "$1_"}],
        "text": "My credit card is 123-456-789"})
    eq(toks(a, ("token", "start_offset", "end_offset"))[-1], ("123_456_789", 18, 29),
       "pattern_replace keeps source offsets")
    a = analyze(n, {"tokenizer": "whitespace", "filter": [
        {"type": "synonym", "synonyms": ["quick, fast", "ny, new york"]}],
        "text": "quick ny"})
    eq(toks(a, ("token", "type", "position")),
       [("quick", "word", 0), ("fast", "SYNONYM", 0), ("ny", "word", 1),
        ("new", "SYNONYM", 1), ("york", "SYNONYM", 2)], "synonyms share positions")
    a = analyze(n, {"tokenizer": "whitespace", "filter": ["word_delimiter_graph"],
                    "text": "Neil's-Super-Duper-XL500--42+AutoCoder"})
    eq(toks(a), ["Neil", "Super", "Duper", "XL", "500", "42", "Auto", "Coder"],
       "word_delimiter_graph")
    a = analyze(n, {"tokenizer": "whitespace", "filter": ["shingle"], "text": "quick brown fox"})
    eq(toks(a, ("token", "type", "position")),
       [("quick", "word", 0), ("quick brown", "shingle", 0), ("brown", "word", 1),
        ("brown fox", "shingle", 1), ("fox", "word", 2)], "shingle")
    # array text: offsets run on (+1 between values), positions jump by 100
    a = analyze(n, {"analyzer": "standard", "text": ["ab cd", "ef"]})
    eq(toks(a, ("token", "start_offset", "end_offset", "position")),
       [("ab", 0, 2, 0), ("cd", 3, 5, 1), ("ef", 6, 8, 102)], "array text")
    # a filter alone runs on the keyword tokenizer
    eq(toks(analyze(n, {"filter": ["uppercase"], "text": "a b"})), ["A B"], "filters only")
    eq(toks(analyze(n, {"analyzer": "english", "text": "running foxes"})), ["run", "fox"],
       "english")
    eq(analyze(n, {"analyzer": "standard", "text": "", "explain": False}), [], "empty text")
    st, b = n.req("POST", "/_analyze", {
        "tokenizer": "standard", "char_filter": ["html_strip"], "explain": True,
        "filter": ["lowercase", {"type": "stop", "stopwords": ["a"]}], "text": "<b>A</b> Fox"})
    eq(st, 200, "explain: %s" % b)
    d = b["detail"]
    eq(d["custom_analyzer"], True, "explain custom")
    eq(d["charfilters"], [{"name": "html_strip", "filtered_text": ["A Fox"]}], "char filter stage")
    eq(d["tokenizer"]["name"], "standard", "tokenizer stage name")
    eq(toks(d["tokenizer"]["tokens"], ("token", "start_offset", "end_offset", "bytes")),
       [("A", 3, 4, "[41]"), ("Fox", 9, 12, "[46 6f 78]")], "tokenizer stage")
    eq([(f["name"], toks(f["tokens"], ("token", "position"))) for f in d["tokenfilters"]],
       [("lowercase", [("a", 0), ("fox", 1)]), ("_anonymous_tokenfilter", [("fox", 1)])],
       "filter stages")
    st, b = n.req("POST", "/_analyze", {"analyzer": "standard", "text": "A", "explain": True})
    eq((b["detail"]["custom_analyzer"], b["detail"]["analyzer"]["name"],
        toks(b["detail"]["analyzer"]["tokens"])), (False, "standard", ["a"]), "explain built-in")


@test
def analyze_errors():
    n = solo()
    cases = [
        ({"analyzer": "nope", "text": "x"}, "illegal_argument_exception",
         "failed to find global analyzer [nope]"),
        ({"tokenizer": "nope", "text": "x"}, "illegal_argument_exception",
         "failed to find global tokenizer under [nope]"),
        ({"tokenizer": "standard", "filter": ["nope"], "text": "x"},
         "illegal_argument_exception", "failed to find global filter under [nope]"),
        ({"tokenizer": "standard", "char_filter": ["nope"], "text": "x"},
         "illegal_argument_exception", "failed to find global char_filter under [nope]"),
        ({"tokenizer": {"type": "nope"}, "text": "x"}, "illegal_argument_exception",
         "Unknown tokenizer type [nope]"),
        ({"tokenizer": "standard", "filter": [{"type": "ngram", "min_gram": 3, "max_gram": 2}],
          "text": "x"}, "illegal_argument_exception", "minGram must not be greater than maxGram"),
        ({"analyzer": "standard"}, "action_request_validation_exception", "text is missing"),
        ({"analyzer": "standard", "text": []}, "action_request_validation_exception",
         "text is missing"),
        ({"analyzer": "standard", "text": 5}, "x_content_parse_exception", None),
        ({"analyzer": 5, "text": "x"}, "x_content_parse_exception", None),
        ({"normalizer": "lowercase", "text": "x"}, "action_request_validation_exception",
         "index is required if normalizer is specified"),
        ({"analyzer": "standard", "tokenizer": "standard", "text": "x"},
         "action_request_validation_exception", "cannot define extra components"),
        ({"field": "f", "text": "x"}, "illegal_argument_exception",
         "analysis based on a specific field requires an index"),
        ({"text": "x", "bogus": 1}, "x_content_parse_exception", "unknown field [bogus]"),
    ]
    for body, etype, reason in cases:
        error_is(n.req("POST", "/_analyze", body), 400, etype, reason)
    error_is(n.req("POST", "/nosuch/_analyze", {"text": "x"}), 404, "index_not_found_exception")
    st, _ = n.req("PUT", "/plain", {})
    eq(st, 200, "plain index")
    error_is(n.req("POST", "/plain/_analyze", {"analyzer": "nope", "text": "x"}), 400,
             "illegal_argument_exception", "failed to find analyzer [nope]")
    error_is(n.req("POST", "/plain/_analyze", {"normalizer": "nope", "text": "x"}), 400,
             "illegal_argument_exception", "failed to find normalizer under [nope]")
    eq(toks(analyze(n, {"normalizer": "lowercase", "text": "AbC"}, "plain")), ["abc"],
       "built-in lowercase normalizer")
    # an unmapped field analyzes with the default analyzer, as ES does
    eq(toks(analyze(n, {"field": "nothing", "text": "A b"}, "plain")), ["a", "b"],
       "unmapped field")


@test
def invalid_settings_create_nothing():
    n = solo()

    def an(**kw):
        return {"settings": {"analysis": kw}}
    cases = [
        (an(analyzer={"a": {"type": "nope"}}), "Unknown analyzer type [nope] for [a]"),
        (an(analyzer={"a": {"tokenizer": "nope"}}),
         "Custom Analyzer [a] failed to find tokenizer under name [nope]"),
        (an(analyzer={"a": {"tokenizer": "standard", "filter": ["lowercase", "nope"]}}),
         "Custom Analyzer [a] failed to find filter under name [nope]"),
        (an(filter={"f": {"type": "nope"}}), "Unknown filter type [nope] for [f]"),
        (an(tokenizer={"t": {"type": "pattern", "pattern": "a(b"}}), "Invalid regex pattern"),
        (an(tokenizer={"t": {"type": "ngram", "min_gram": 1, "max_gram": 4}}),
         "The difference between max_gram and min_gram in NGram Tokenizer must be less than "
         "or equal to: [1] but was [3]"),
        (an(normalizer={"n": {"filter": ["stemmer"]}}),
         "Custom normalizer [n] may not use filter [stemmer]"),
        (an(filter={"s": {"type": "synonym", "synonyms": ["a, the"]}},
            analyzer={"x": {"tokenizer": "standard", "filter": ["stop", "s"]}}),
         "failed to build synonyms"),
        ({"settings": {"index.analysis.analyzer.a.tokenizer": "nope"}},
         "failed to find tokenizer under name [nope]"),
        ({"settings": {"analysis": {"analyzer": {"a": {"tokenizer": "standard"}}}},
          "mappings": {"properties": {"t": {"type": "text", "analyzer": "b"}}}},
         "analyzer [b] has not been configured in mappings"),
        ({"mappings": {"properties": {"k": {"type": "keyword", "normalizer": "nope"}}}},
         "normalizer [nope] not found for field [k]"),
    ]
    for body, reason in cases:
        st, b = n.req("PUT", "/badan", body)
        eq(st, 400, "%s: %s" % (body, b))
        if reason not in b["error"]["reason"]:
            raise AssertionError("reason %r lacks %r" % (b["error"]["reason"], reason))
        eq(n.req("HEAD", "/badan")[0], 404, "nothing created by %s" % body)
    # index.max_ngram_diff lifts the limit; the flat form works like the nested one
    st, b = n.req("PUT", "/ngr", {"settings": {
        "index.max_ngram_diff": 3,
        "index.analysis.tokenizer.t.type": "ngram",
        "index.analysis.tokenizer.t.min_gram": 1, "index.analysis.tokenizer.t.max_gram": 4,
        "index.analysis.analyzer.a.tokenizer": "t"}})
    eq(st, 200, "max_ngram_diff: %s" % b)
    eq(len(analyze(n, {"analyzer": "a", "text": "abcd"}, "ngr")), 10, "grams 1..4 of abcd")


@test
def default_analyzer():
    n = solo()
    st, b = n.req("PUT", "/defan", {"settings": {"analysis": {"analyzer": {
        "default": {"tokenizer": "whitespace", "filter": ["lowercase"]},
        "default_search": {"tokenizer": "whitespace", "filter": ["lowercase", "reverse"]}}}},
        "mappings": {"properties": {"s": {"type": "text", "analyzer": "standard",
                                          "search_analyzer": "standard"}}}})
    eq(st, 200, "create: %s" % b)
    st, b = n.req("PUT", "/defan/_doc/1?refresh=true", {"t": "Foo-Bar", "s": "Foo-Bar"})
    eq(st, 201, "index: %s" % b)
    q = lambda f, v: ids(n, "defan", {"match": {f: v}})[0]  # noqa: E731
    # dynamic field t: indexed with "default" (one token foo-bar), searched with
    # "default_search" (reversed), so only the reversed text finds it
    eq(q("t", "RAB-OOF"), ["1"], "default_search on a dynamic field")
    eq(q("t", "foo-bar"), [], "the search side reverses")
    eq(q("s", "bar"), ["1"], "explicit analyzers win")
    st, b = n.req("GET", "/defan/_mapping")
    eq(b["defan"]["mappings"]["properties"]["t"]["type"], "text", "dynamic text")
    eq("analyzer" in b["defan"]["mappings"]["properties"]["t"], False,
       "default analyzer not rendered")


@test
def templates_snapshots_builtins():
    n = solo()
    # a template carries analysis settings and a mapping that uses them
    st, b = n.req("PUT", "/_index_template/an-tpl", {"index_patterns": ["tpl-*"], "template": {
        "settings": {"analysis": {"analyzer": {"rev": {"tokenizer": "whitespace",
                                                       "filter": ["reverse"]}}}},
        "mappings": {"properties": {"r": {"type": "text", "analyzer": "rev"}}}}})
    eq(st, 200, "template: %s" % b)
    st, b = n.req("PUT", "/_index_template/an-bad", {"index_patterns": ["bad-*"], "template": {
        "mappings": {"properties": {"r": {"type": "text", "analyzer": "rev"}}}}})
    eq(st, 400, "template naming an analyzer it lacks: %s" % b)
    st, b = n.req("PUT", "/tpl-1/_doc/1?refresh=true", {"r": "abc def"})
    eq(st, 201, "auto-created from the template: %s" % b)
    eq(toks(analyze(n, {"field": "r", "text": "abc def"}, "tpl-1")), ["cba", "fed"],
       "template analyzer")
    eq(ids(n, "tpl-1", {"term": {"r": "fed"}})[0], ["1"], "indexed reversed")
    # ES's stop, pattern and snowball analyzers by name
    eq(toks(analyze(n, {"analyzer": "stop", "text": "The 2 QUICK foxes"})), ["quick", "foxes"],
       "stop analyzer")
    eq(toks(analyze(n, {"analyzer": "pattern", "text": "A-b_c d"})), ["a", "b_c", "d"],
       "pattern analyzer")
    eq(toks(analyze(n, {"analyzer": "snowball", "text": "the running foxes"})), ["run", "fox"],
       "snowball analyzer")
    st, b = n.req("PUT", "/stopan", {"mappings": {"properties": {
        "t": {"type": "text", "analyzer": "stop"}}}})
    eq(st, 200, "built-in stop analyzer in a mapping: %s" % b)
    # a snapshot keeps the analysis settings the mapping relies on
    repo = os.path.join(TMP, "repo")
    snode = Node(args=["-E", "path.repo=" + repo])
    try:
        make_books(snode, "sbooks")
        st, b = snode.req("PUT", "/_snapshot/r", {"type": "fs", "settings": {"location": repo}})
        eq(st, 200, "repo: %s" % b)
        st, b = snode.req("PUT", "/_snapshot/r/s1?wait_for_completion=true",
                          {"indices": "sbooks"})
        eq(st, 200, "snapshot: %s" % b)
        eq(snode.req("DELETE", "/sbooks")[0], 200, "delete")
        st, b = snode.req("POST", "/_snapshot/r/s1/_restore?wait_for_completion=true", {})
        eq(st, 200, "restore: %s" % b)
        snode.req("GET", "/_cluster/health/sbooks?wait_for_status=yellow&timeout=20s")
        check_books(snode, "sbooks", "restored")
    finally:
        snode.stop()


@test
def books_solo_and_restart():
    n = solo()
    make_books(n, "books")
    check_books(n, "books", "solo")
    st, b = n.req("GET", "/books/_settings")
    eq(b["books"]["settings"]["index"]["analysis"]["normalizer"],
       {"tagnorm": {"type": "custom", "filter": ["lowercase", "asciifolding"]}},
       "analysis settings rendered")
    st, b = n.req("GET", "/books/_mapping")
    eq(b["books"]["mappings"]["properties"]["suggest"],
       {"type": "text", "analyzer": "ac_an", "search_analyzer": "ac_search"}, "mapping")
    eq(b["books"]["mappings"]["properties"]["tag"], {"type": "keyword", "normalizer": "tagnorm"},
       "normalizer in the mapping")
    eq(b["books"]["mappings"]["properties"]["title"]["fields"],
       {"folded": {"type": "keyword", "normalizer": "tagnorm"}}, "multi-field normalizer")
    # analysis is static: ES refuses it on an open index (Shoal has no _close)
    error_is(n.req("PUT", "/books/_settings", {"index": {"analysis": {"analyzer": {
        "x": {"tokenizer": "standard"}}}}}), 400, "illegal_argument_exception",
        "Can't update non dynamic settings")
    # a field added later may use the index's analyzers
    st, b = n.req("PUT", "/books/_mapping", {"properties": {
        "extra": {"type": "text", "analyzer": "body_an"}}})
    eq(st, 200, "put mapping with a custom analyzer: %s" % b)
    error_is(n.req("PUT", "/books/_mapping", {"properties": {
        "title": {"type": "text", "analyzer": "standard"}}}), 400, "illegal_argument_exception",
        "analyzer")
    n.restart()
    check_books(n, "books", "solo after restart")


@test
def books_cluster():
    c = cluster()
    make_books(c["node-1"], "cbooks", replicas=1)  # replicas analyze on their own nodes
    st, b = c["node-2"].req("PUT", "/cbad", {"settings": {"analysis": {"analyzer": {
        "a": {"tokenizer": "standard", "filter": ["nope"]}}}}})
    eq(st, 400, "invalid analysis through a cluster node: %s" % b)
    eq(b["error"]["reason"], "Custom Analyzer [a] failed to find filter under name [nope]",
       "ES's message on a cluster")
    for name, node in c.items():
        eq(node.req("HEAD", "/cbad")[0], 404, "nothing created on " + name)
    for name, node in c.items():
        check_books(node, "cbooks", name)
    c["node-2"].restart()
    for name in NAMES:
        wait_nodes(c[name])
    st, b = c["node-2"].req("GET", "/_cluster/health/cbooks?wait_for_status=green&timeout=30s",
                            timeout=40)
    eq(st, 200, "health after restart: %s" % b)
    check_books(c["node-2"], "cbooks", "node-2 after restart")


def teardown():
    rc = 0
    if SOLO:
        rc = SOLO.stop() or rc
    for n in CLUSTER.values():
        rc = n.stop() or rc
    shutil.rmtree(TMP, ignore_errors=True)
    return rc


if __name__ == "__main__":
    run_tests(budget_s=55, teardown=teardown)
