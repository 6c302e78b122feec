"""Debian's python3-elasticsearch 7.17 client, unmodified, against a Shoal
node: create index, index, bulk helper, search, scan/scroll helper, count,
delete. Usage: /usr/bin/python3 es_flow.py http://127.0.0.1:PORT"""
import sys

from elasticsearch import Elasticsearch, helpers


def main(url):
    es = Elasticsearch([url])
    info = es.info()
    assert info["version"]["number"] == "7.10.2", info
    index = "py-flow"
    r = es.indices.create(index=index, body={
        "settings": {"number_of_shards": 3, "number_of_replicas": 0},
        "mappings": {"properties": {"title": {"type": "text"}, "n": {"type": "long"}}}})
    assert r["acknowledged"] is True
    r = es.index(index=index, id="a", body={"title": "hello shoal", "n": -1}, refresh=True)
    assert r["result"] == "created", r
    actions = ({"_index": index, "_id": "d%d" % i,
                "_source": {"title": "odd fish" if i % 2 else "even fish", "n": i}}
               for i in range(300))
    ok, errors = helpers.bulk(es, actions, refresh=True)
    assert ok == 300 and not errors, errors
    r = es.search(index=index, body={"query": {"match": {"title": "even"}}, "size": 3})
    assert r["hits"]["total"]["value"] == 150, r["hits"]["total"]
    assert len(r["hits"]["hits"]) == 3
    seen = sorted(h["_id"] for h in helpers.scan(es, index=index, size=70,
                                                 query={"query": {"match": {"title": "fish"}}}))
    assert len(seen) == 300, len(seen)
    assert es.count(index=index, body={"query": {"range": {"n": {"lt": 100}}}})["count"] == 101
    assert es.get(index=index, id="a")["_source"]["title"] == "hello shoal"
    assert es.delete(index=index, id="a", refresh=True)["result"] == "deleted"
    assert es.indices.delete(index=index)["acknowledged"] is True
    print("python elasticsearch flow: ok")


if __name__ == "__main__":
    main(sys.argv[1])
