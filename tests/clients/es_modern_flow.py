"""The Python `elasticsearch` 8.x and 9.x clients (from the Python package
index, pinned in requirements-es8.txt / requirements-es9.txt), unmodified,
against a Shoal cluster given by every node's URL. They send versioned
media types (compatible-with=8 or 9) and check the product header. The
flow: health, create with mappings, the bulk helper, search with an
aggregation, count, index/get/update/mget, the scan helper, an alias,
point-in-time paging, msearch, delete_by_query, _cat, delete.
Usage: PYTHON es_modern_flow.py URL [URL ...]"""
import sys

from elasticsearch import Elasticsearch, helpers


def main(urls):
    es = Elasticsearch(urls, request_timeout=30)
    major = int(sys.modules["elasticsearch"].__versionstr__.split(".")[0])
    index = "py%d-flow" % major
    assert es.info()["version"]["number"] == "7.10.2"
    h = es.cluster.health(wait_for_status="green", timeout="30s")
    assert h["status"] == "green" and h["number_of_nodes"] == len(urls), h
    es.options(ignore_status=404).indices.delete(index=index)
    r = es.indices.create(index=index,
                          settings={"number_of_shards": 3, "number_of_replicas": 1},
                          mappings={"properties": {"title": {"type": "text"},
                                                   "year": {"type": "integer"},
                                                   "tag": {"type": "keyword"}}})
    assert r["acknowledged"] is True, r
    ok, errors = helpers.bulk(es, ({"_index": index, "_id": str(i),
                                    "title": "book %d about shoal" % i, "year": 1990 + i % 30,
                                    "tag": "t%d" % (i % 4)} for i in range(500)), refresh=True)
    assert ok == 500 and not errors, errors
    r = es.search(index=index, query={"match": {"title": "shoal"}}, size=3,
                  aggs={"tags": {"terms": {"field": "tag"}}})
    assert r["hits"]["total"] == {"value": 500, "relation": "eq"}, r["hits"]["total"]
    assert len(r["hits"]["hits"]) == 3
    assert {b["key"]: b["doc_count"] for b in r["aggregations"]["tags"]["buckets"]} == \
        {"t0": 125, "t1": 125, "t2": 125, "t3": 125}, r["aggregations"]
    # years 2000..2019 of each 30: 20 of every 30 ids
    n = es.count(index=index, query={"range": {"year": {"gte": 2000}}})["count"]
    assert n == sum(1 for i in range(500) if 1990 + i % 30 >= 2000), n
    r = es.index(index=index, id="x", document={"title": "new", "year": 2024}, refresh="wait_for")
    assert r["result"] == "created", r
    assert es.get(index=index, id="x")["_source"] == {"title": "new", "year": 2024}
    es.update(index=index, id="x", doc={"year": 2025}, refresh=True)
    assert es.get(index=index, id="x")["_source"]["year"] == 2025
    r = es.mget(index=index, ids=["x", "1", "nope"])
    assert [d["found"] for d in r["docs"]] == [True, True, False], r
    seen = sorted(h["_id"] for h in helpers.scan(es, index=index, size=70,
                                                 query={"query": {"match_all": {}}}))
    assert len(seen) == 501 and len(set(seen)) == 501, len(seen)
    es.indices.put_alias(index=index, name=index + "-alias")
    r = es.search(index=index + "-alias", size=0, query={"term": {"tag": "t2"}})
    assert r["hits"]["total"]["value"] == 125, r["hits"]["total"]
    # point in time: every document once, in pages sorted by year then _id
    pit = es.open_point_in_time(index=index, keep_alive="1m")["id"]
    got, after = [], None
    while True:
        kw = {"search_after": after} if after else {}
        r = es.search(pit={"id": pit, "keep_alive": "1m"}, size=128,
                      sort=[{"year": "asc"}, {"_shard_doc": "asc"}], **kw)
        hits = r["hits"]["hits"]
        if not hits:
            break
        got += [h["_id"] for h in hits]
        after = hits[-1]["sort"]
        pit = r.get("pit_id", pit)
    es.close_point_in_time(id=pit)
    assert sorted(got) == seen, (len(got), len(seen))
    r = es.msearch(searches=[{"index": index}, {"query": {"match_all": {}}},
                             {"index": index}, {"query": {"term": {"tag": "t1"}}}])
    assert [x["hits"]["total"]["value"] for x in r["responses"]] == [501, 125], r
    r = es.delete_by_query(index=index, query={"term": {"tag": "t1"}}, refresh=True)
    assert r["deleted"] == 125, r
    assert es.count(index=index)["count"] == 376
    rows = es.cat.indices(index=index, format="json")
    assert rows[0]["index"] == index and rows[0]["health"] == "green", rows
    assert es.indices.delete(index=index)["acknowledged"] is True
    assert not es.indices.exists(index=index)
    print("flow: ok (elasticsearch-py %s)" % sys.modules["elasticsearch"].__versionstr__)


if __name__ == "__main__":
    main(sys.argv[1:])
