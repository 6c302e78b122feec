"""Highlighting (issue 13) on a solo node and a 3-node static cluster: the
unified highlighter's fragments for match, match_phrase, prefix, wildcard,
fuzzy, term and query_string queries on text and keyword fields, the
options (fields patterns, tags, fragment_size, number_of_fragments,
no_match_size, require_field_match, highlight_query, order, encoder,
type), and the 400s for bad options. Expected fragments are worked out
by hand: sentences are the passages, cut at the first word boundary past
fragment_size; every matching token is wrapped on its own."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import ClusterNode, Node, cluster_file, eq, error_is, run_tests, test  # noqa: E402

TMP = tempfile.mkdtemp(prefix="shoal-highlight-test-")
NAMES = ["node-1", "node-2", "node-3"]
SOLO = None
CLUSTER = {}
READY = set()

BODY1 = ("The quick brown fox jumps over the lazy dog. Dogs are lazy. "
         "A quick brown dog is rare.")
BODY2 = "Bears are brown. Foxes are quick and brown too."
DOCS = {
    "1": {"title": "The quick brown fox", "body": BODY1, "tag": "animals",
          "notes": ["first note about foxes", "a second note"]},
    "2": {"title": "Brown bears", "body": BODY2, "tag": "bears & more",
          "notes": "nothing here"},
    "3": {"title": "Quantum <physics>", "body": "Entirely unrelated text about physics.",
          "tag": "science"},
}


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
            st, b = CLUSTER[n].req("GET", "/_cluster/health?wait_for_nodes=3&timeout=60s",
                                   timeout=80)
            eq((st, b.get("number_of_nodes")), (200, 3), "3 nodes seen by " + n)
    return CLUSTER


def setup(label, w):
    if label in READY:
        return
    st, b = w.req("PUT", "/hl", {
        "settings": {"number_of_shards": 3, "number_of_replicas": 0},
        "mappings": {"properties": {
            "title": {"type": "text", "fields": {"raw": {"type": "keyword"}}},
            "body": {"type": "text", "analyzer": "english"},
            "tag": {"type": "keyword"},
            "notes": {"type": "text"}}}})
    eq(st, 200, "create hl on %s: %s" % (label, b))
    lines = []
    for i, d in DOCS.items():
        lines += [{"index": {"_index": "hl", "_id": i}}, d]
    st, b = w.bulk(lines, params="?refresh=true")
    eq((st, b["errors"]), (200, False), "bulk")
    READY.add(label)


def targets():
    """(label, nodes to ask): the solo node, then every cluster node."""
    s = solo()
    setup("solo", s)
    c = cluster()
    setup("cluster", c["node-1"])
    return [("solo", [s]), ("cluster", list(c.values()))]


def hl(n, query, highlight, **extra):
    body = {"query": query, "highlight": highlight, "sort": ["_id"]}
    body.update(extra)
    st, b = n.req("POST", "/hl/_search", body)
    eq(st, 200, "search %s: %s" % (body, b))
    return {h["_id"]: h.get("highlight") for h in b["hits"]["hits"]}


def each(fn):
    for label, nodes in targets():
        for n in nodes:
            fn(n, "%s via %s" % (label, n.port))


@test
def match_and_phrase():
    def check(n, what):
        eq(hl(n, {"match": {"body": "quick"}}, {"fields": {"body": {}}}), {
            "1": {"body": ["The <em>quick</em> brown fox jumps over the lazy dog.",
                           "A <em>quick</em> brown dog is rare."]},
            "2": {"body": ["Foxes are <em>quick</em> and brown too."]}}, "match " + what)
        # the english analyzer stems: "dogs" finds "dog." and "Dogs"
        eq(hl(n, {"match": {"body": "dogs"}}, {"fields": {"body": {}}}), {
            "1": {"body": ["The quick brown fox jumps over the lazy <em>dog</em>.",
                           "<em>Dogs</em> are lazy.", "A quick brown <em>dog</em> is rare."]}},
           "stemmed " + what)
        # only the phrase's positions: "brown" of "are brown" stays plain
        eq(hl(n, {"match_phrase": {"body": "quick brown"}}, {"fields": {"body": {}}}), {
            "1": {"body": ["The <em>quick</em> <em>brown</em> fox jumps over the lazy dog.",
                           "A <em>quick</em> <em>brown</em> dog is rare."]}}, "phrase " + what)
        eq(hl(n, {"match_phrase": {"body": {"query": "quick fox", "slop": 1}}},
              {"fields": {"body": {}}}),
           {"1": {"body": ["The <em>quick</em> brown <em>fox</em> jumps over the lazy dog."]}},
           "sloppy phrase " + what)
        eq(hl(n, {"match_phrase_prefix": {"body": "quick bro"}}, {"fields": {"body": {}}}), {
            "1": {"body": ["The <em>quick</em> <em>brown</em> fox jumps over the lazy dog.",
                           "A <em>quick</em> <em>brown</em> dog is rare."]}}, "phrase prefix " + what)
        eq(hl(n, {"multi_match": {"query": "brown bears", "fields": ["title^2", "body"]}},
              {"fields": {"title": {}}, "require_field_match": True}), {
            "1": {"title": ["The quick <em>brown</em> fox"]},
            "2": {"title": ["<em>Brown</em> <em>bears</em>"]}}, "multi_match " + what)
        eq(hl(n, {"multi_match": {"query": "quick brown", "type": "phrase", "fields": ["b*"]}},
              {"fields": {"*": {}}, "require_field_match": True}), {
            "1": {"body": ["The <em>quick</em> <em>brown</em> fox jumps over the lazy dog.",
                           "A <em>quick</em> <em>brown</em> dog is rare."]}},
           "multi_match phrase over a pattern " + what)
        eq(hl(n, {"bool": {"filter": [{"term": {"title": "bears"}}]}}, {"fields": {"title": {}}}),
           {"2": {"title": ["Brown <em>bears</em>"]}}, "filter clauses count " + what)
        eq(hl(n, {"bool": {"must": [{"match": {"title": "brown"}}],
                           "must_not": [{"match": {"title": "fox"}}]}},
              {"fields": {"title": {}}}),
           {"2": {"title": ["<em>Brown</em> bears"]}}, "must_not not highlighted " + what)
    each(check)


@test
def multiterm_queries():
    def check(n, what):
        eq(hl(n, {"prefix": {"title": "bro"}}, {"fields": {"title": {}}}), {
            "1": {"title": ["The quick <em>brown</em> fox"]},
            "2": {"title": ["<em>Brown</em> bears"]}}, "prefix " + what)
        eq(hl(n, {"wildcard": {"title": "b*s"}}, {"fields": {"title": {}}}),
           {"2": {"title": ["Brown <em>bears</em>"]}}, "wildcard " + what)
        eq(hl(n, {"fuzzy": {"title": "quack"}}, {"fields": {"title": {}}}),
           {"1": {"title": ["The <em>quick</em> brown fox"]}}, "fuzzy " + what)
        eq(hl(n, {"match": {"title": {"query": "quantom", "fuzziness": "AUTO"}}},
              {"fields": {"title": {}}}),
           {"3": {"title": ["<em>Quantum</em> <physics>"]}}, "match fuzziness " + what)
        eq(hl(n, {"query_string": {"query": "title:bear* OR body:rare"}},
              {"fields": {"title": {}, "body": {}}}), {
            "1": {"body": ["A quick brown dog is <em>rare</em>."]},
            "2": {"title": ["Brown <em>bears</em>"]}}, "query_string " + what)
        eq(hl(n, {"query_string": {"query": "title:bear* OR body:rare"}},
              {"fields": {"title": {}, "body": {}}, "require_field_match": False}), {
            "1": {"body": ["A quick brown dog is <em>rare</em>."]},
            "2": {"title": ["Brown <em>bears</em>"], "body": ["<em>Bears</em> are brown."]}},
           "query_string, bear* reaches body without require_field_match " + what)
    each(check)


@test
def keyword_fields():
    def check(n, what):
        eq(hl(n, {"term": {"tag": "bears & more"}}, {"fields": {"tag": {}}}),
           {"2": {"tag": ["<em>bears & more</em>"]}}, "keyword term " + what)
        eq(hl(n, {"term": {"tag": "bears & more"}}, {"fields": {"tag": {}}, "encoder": "html"}),
           {"2": {"tag": ["<em>bears &amp; more</em>"]}}, "html encoder " + what)
        eq(hl(n, {"prefix": {"title.raw": "Brown"}}, {"fields": {"title.raw": {}}}),
           {"2": {"title.raw": ["<em>Brown bears</em>"]}}, "multi-field keyword " + what)
        # a keyword value is one token: a text term does not match inside it
        eq(hl(n, {"match": {"title": "brown"}}, {"fields": {"title.raw": {}}}),
           {"1": None, "2": None}, "no partial keyword match " + what)
    each(check)


@test
def options():
    def check(n, what):
        eq(hl(n, {"match": {"body": "lazy"}}, {"fields": {"body": {"fragment_size": 20}}}),
           {"1": {"body": ["<em>lazy</em> dog.", "Dogs are <em>lazy</em>."]}},
           "fragment_size " + what)
        eq(hl(n, {"match": {"body": "lazy"}}, {"fields": {"body": {"number_of_fragments": 1}}}),
           {"1": {"body": ["Dogs are <em>lazy</em>."]}}, "best fragment only " + what)
        eq(hl(n, {"match": {"body": "lazy"}},
              {"fields": {"body": {"number_of_fragments": 2, "order": "score"}}}),
           {"1": {"body": ["Dogs are <em>lazy</em>.",
                           "The quick brown fox jumps over the <em>lazy</em> dog."]}},
           "order by score " + what)
        eq(hl(n, {"match": {"body": "rare"}}, {"fields": {"body": {"number_of_fragments": 0}}}),
           {"1": {"body": [BODY1.replace("rare", "<em>rare</em>")]}}, "whole field " + what)
        eq(hl(n, {"match": {"notes": "note"}}, {"fields": {"notes": {}}}),
           {"1": {"notes": ["first <em>note</em> about foxes", "a second <em>note</em>"]}},
           "multi-valued " + what)
        eq(hl(n, {"match": {"title": "fox"}},
              {"fields": {"title": {"pre_tags": ["["], "post_tags": ["]"]},
                          "body": {"no_match_size": 15}}, "require_field_match": True}),
           {"1": {"title": ["The quick brown [fox]"], "body": ["The quick brown"]}},
           "tags, no_match_size, require_field_match " + what)
        # require_field_match is true by default: a title query leaves body
        # alone, unless it is turned off
        eq(hl(n, {"match": {"title": "fox"}}, {"fields": {"body": {}}}), {"1": None},
           "require_field_match by default " + what)
        eq(hl(n, {"match": {"title": "fox"}},
              {"fields": {"body": {}}, "require_field_match": False}),
           {"1": {"body": ["The quick brown <em>fox</em> jumps over the lazy dog."]}},
           "require_field_match false " + what)
        eq(hl(n, {"match": {"title": "fox"}},
              {"fields": {"body": {"require_field_match": False}}, "require_field_match": True}),
           {"1": {"body": ["The quick brown <em>fox</em> jumps over the lazy dog."]}},
           "a field's option wins " + what)
        eq(hl(n, {"match": {"title": "fox"}},
              {"fields": {"t*": {}}, "pre_tags": "<b>", "post_tags": "</b>", "type": "plain"}),
           {"1": {"title": ["The quick brown <b>fox</b>"]}}, "pattern, string tags " + what)
        eq(hl(n, {"match": {"title": "brown"}},
              {"fields": {"body": {"highlight_query": {"match": {"body": "bears"}}}}}),
           {"1": None, "2": {"body": ["<em>Bears</em> are brown."]}}, "highlight_query " + what)
        eq(hl(n, {"match": {"body": "quick"}}, {"fields": [{"title": {}}, {"body": {
            "number_of_fragments": 1, "fragment_size": 200}}]}, _source=False),
           {"1": {"body": ["A <em>quick</em> brown dog is rare."]},
            "2": {"body": ["Foxes are <em>quick</em> and brown too."]}},
           "fields as an array, _source off (Lucene's passage score prefers the shorter "
           "sentence; title has no match of a body query) " + what)
    each(check)


@test
def bad_requests():
    n = solo()
    setup("solo", n)
    q = {"match": {"title": "fox"}}
    cases = [
        ({"fields": {"title": {}}, "bogus": 1}, 400, "x_content_parse_exception",
         "unknown field [bogus]"),
        ({"fields": {"title": {"fragment_sise": 10}}}, 400, "x_content_parse_exception",
         "unknown field [fragment_sise]"),
        ({"fields": {"title": {"type": "nope"}}}, 400, "illegal_argument_exception",
         "unknown highlighter type [nope]"),
        ({"fields": {"title": {"number_of_fragments": -1}}}, 400,
         "illegal_argument_exception", "number_of_fragments"),
        ({"fields": {"title": {"fragment_size": "big"}}}, 400, "x_content_parse_exception",
         "fragment_size"),
        ({"fields": {"title": {"pre_tags": [1]}}}, 400, "x_content_parse_exception",
         "pre_tags"),
        ({"fields": {"title": {"order": "random"}}}, 400, "illegal_argument_exception",
         "Unknown Order"),
        ({"fields": {"title": {"highlight_query": {"nope": {}}}}}, 400, "parsing_exception",
         "unknown query [nope]"),
        ({}, 400, "parsing_exception", "requires [fields]"),
        ({"fields": "title"}, 400, "x_content_parse_exception", None),
        ({"fields": [{"a": {}, "b": {}}]}, 400, "parsing_exception", "single field"),
    ]
    for h, st, typ, why in cases:
        r = n.req("POST", "/hl/_search", {"query": q, "highlight": h})
        error_is(r, st, typ, why)
    eq(n.req("POST", "/hl/_search", {"highlight": 5})[0], 400, "highlight not an object")


def teardown():
    rc = 0
    if SOLO:
        rc = SOLO.stop() or rc
    for n in CLUSTER.values():
        rc = n.stop() or rc
    shutil.rmtree(TMP, ignore_errors=True)
    return rc



@test
def max_analyzed_offset_bounds_reanalysis():
    # index.highlight.max_analyzed_offset bounds the text a highlighter
    # analyses again: plain always, unified unless offsets are indexed
    # (index_options or term_vector); a scroll page is bounded too
    text = "The quick brown fox went to the forest and saw another fox."
    for label, nodes in targets():
        w = nodes[0]
        w.req("DELETE", "/hlmax")
        st, b = w.req("PUT", "/hlmax", {
            # one shard: with more, the others' hits would come back beside the
            # failed shard (a partial result, as ES gives)
            "settings": {"number_of_shards": 1, "number_of_replicas": 0,
                         "index.highlight.max_analyzed_offset": 20},
            "mappings": {"properties": {
                "plain": {"type": "text"},
                "offs": {"type": "text", "index_options": "offsets"},
                "tv": {"type": "text", "term_vector": "with_positions_offsets"},
                "short": {"type": "text"}}}})
        eq(st, 200, label + " create: %s" % b)
        w.req("PUT", "/hlmax/_doc/1?refresh=true",
              {"plain": text, "offs": text, "tv": text, "short": ["a fox", "fox b"]})
        st, b = w.req("GET", "/hlmax/_mapping")
        props = b["hlmax"]["mappings"]["properties"]
        eq((props["offs"].get("index_options"), props["tv"].get("term_vector")),
           ("offsets", "with_positions_offsets"), label + " echoed: %s" % props)
        for n in nodes:
            def search(field, kind, path="/hlmax/_search"):
                return n.req("POST", path, {"query": {"match": {field: "fox"}},
                                            "highlight": {"type": kind, "fields": {field: {}}}})
            for field, kind in (("plain", "unified"), ("plain", "plain"), ("offs", "plain"),
                                ("tv", "plain")):
                error_is(search(field, kind), 400, "illegal_argument_exception",
                         "The length of [%s] field of [1] doc of [hlmax] index has exceeded "
                         "[20] - maximum allowed to be analyzed for highlighting." % field)
            for field in ("offs", "tv"):
                st, b = search(field, "unified")
                eq(b["hits"]["hits"][0]["highlight"][field],
                   ["The quick brown <em>fox</em> went to the forest and saw another "
                    "<em>fox</em>."], label + " %s with offsets: %s" % (field, b))
            # values short enough one by one: plain passes, unified counts them together
            st, b = search("short", "plain")
            eq(b["hits"]["hits"][0]["highlight"]["short"], ["a <em>fox</em>", "<em>fox</em> b"],
               label + " short values, plain: %s" % b)
            st, b = n.req("POST", "/hlmax/_search?scroll=1m", {
                "size": 1, "query": {"match": {"plain": "fox"}},
                "highlight": {"fields": {"plain": {}}}})
            eq(st, 400, label + " scroll: %s" % b)
        st, b = w.req("PUT", "/hlmax/_settings", {"index.highlight.max_analyzed_offset": 1000})
        eq(st, 200, label + " raised: %s" % b)
        st, b = nodes[-1].req("POST", "/hlmax/_search", {
            "query": {"match": {"plain": "fox"}},
            "highlight": {"type": "plain", "fields": {"plain": {}}}})
        eq((st, len(b["hits"]["hits"][0]["highlight"]["plain"])), (200, 1),
           label + " under the raised bound: %s" % b)
        w.req("DELETE", "/hlmax")

if __name__ == "__main__":
    run_tests(budget_s=300, teardown=teardown)
