"""Debian's python3-elasticsearch 7.17 client, unmodified, against a Shoal
cluster: sniffs the nodes from one of them (GET /_nodes/_all/http) and
works through every node it found: an index template picked up on
auto-creation, aliases (put, get, update_aliases with a filter), search
with fields through an alias. Usage:
/usr/bin/python3 es_sniff_flow.py http://127.0.0.1:PORT HOST:PORT,HOST:PORT"""
import sys

from elasticsearch import Elasticsearch


def main(url, expect):
    es = Elasticsearch([url], sniff_on_start=True)
    found = sorted("%s:%s" % (c.host.split("//")[-1].split(":")[0], c.port)
                   for c in es.transport.connection_pool.connections)
    assert found == sorted(expect.split(",")), (found, expect)
    r = es.indices.put_index_template(name="py-tpl", body={
        "index_patterns": ["py-logs-*"], "priority": 3,
        "template": {"settings": {"number_of_shards": 2},
                     "mappings": {"properties": {"code": {"type": "keyword"},
                                                 "at": {"type": "date"}}},
                     "aliases": {"py-logs": {}}}})
    assert r["acknowledged"] is True, r
    for i in range(20):  # round robin over the sniffed nodes
        es.index(index="py-logs-2026.12.01", id=str(i),
                 body={"code": "c%d" % (i % 4), "at": "2026-12-01T00:00:%02dZ" % i})
    es.indices.refresh(index="py-logs-2026.12.01")
    s = es.indices.get_settings(index="py-logs-2026.12.01")
    assert s["py-logs-2026.12.01"]["settings"]["index"]["number_of_shards"] == "2", s
    assert es.indices.get_alias(name="py-logs") == {"py-logs-2026.12.01": {"aliases": {"py-logs": {}}}}
    r = es.indices.update_aliases(body={"actions": [
        {"add": {"index": "py-logs-*", "alias": "py-c1", "filter": {"term": {"code": "c1"}}}}]})
    assert r["acknowledged"] is True, r
    r = es.search(index="py-c1", body={"fields": [{"field": "at", "format": "epoch_second"}],
                                      "_source": False, "sort": ["at"]})
    assert r["hits"]["total"]["value"] == 5, r["hits"]["total"]
    got = [h["fields"]["at"][0] for h in r["hits"]["hits"]]
    assert got == [str(1796083200 + i) for i in (1, 5, 9, 13, 17)], got
    assert es.indices.exists_alias(name="py-c1")
    es.indices.delete_alias(index="py-logs-2026.12.01", name="py-c1")
    assert not es.indices.exists_alias(name="py-c1")
    es.indices.delete(index="py-logs-2026.12.01")
    es.indices.delete_index_template(name="py-tpl")
    print("python elasticsearch sniffing flow: ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
