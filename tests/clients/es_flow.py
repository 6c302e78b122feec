"""Debian's python3-elasticsearch 7.17 client, unmodified, against a Shoal
node (or cluster): create index, index, bulk helper, search, scan/scroll
helper, reindex helper, point-in-time paging, delete_by_query,
update_by_query, reindex and tasks, count, delete.
Usage: /usr/bin/python3 es_flow.py http://127.0.0.1:PORT [REPLICAS]"""
import sys
import time

from elasticsearch import Elasticsearch, helpers


def main(url, replicas=0):
    es = Elasticsearch([url])
    info = es.info()
    assert info["version"]["number"] == "7.10.2", info
    index = "py-flow"
    r = es.indices.create(index=index, body={
        "settings": {"number_of_shards": 3, "number_of_replicas": replicas},
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
    # scan sorted by _doc (preserve_order=False) and by a field
    seen = [h["_id"] for h in helpers.scan(es, index=index, size=50, preserve_order=True,
                                          query={"sort": [{"n": "desc"}]})]
    assert len(seen) == 301 and seen[0] == "d299" and seen[-1] == "a", seen[:3]
    # helpers.reindex (scan + bulk) and the _reindex API
    ok, errors = helpers.reindex(es, index, index + "-copy", chunk_size=64,
                                 bulk_kwargs={"refresh": True})
    assert ok == 301 and not errors, (ok, errors)
    assert es.count(index=index + "-copy")["count"] == 301
    r = es.reindex(body={"source": {"index": index, "query": {"range": {"n": {"lt": 10}}}},
                         "dest": {"index": index + "-ten"}}, refresh=True)
    assert r["created"] == 11 and r["failures"] == [], r
    # point in time with search_after
    pit = es.open_point_in_time(index=index, keep_alive="1m")["id"]
    es.index(index=index, id="late", body={"title": "late fish", "n": 1000}, refresh=True)
    ids, after = [], None
    while True:
        body = {"size": 40, "pit": {"id": pit, "keep_alive": "1m"}, "sort": [{"n": "asc"}]}
        if after:
            body["search_after"] = after
        hits = es.search(body=body)["hits"]["hits"]
        if not hits:
            break
        ids += [h["_id"] for h in hits]
        after = hits[-1]["sort"]
    assert len(ids) == 301 and "late" not in ids, len(ids)
    assert es.close_point_in_time(body={"id": pit})["succeeded"] is True
    # update_by_query, delete_by_query, and a task
    r = es.update_by_query(index=index, body={"query": {"match": {"title": "odd"}}},
                           refresh=True, conflicts="proceed")
    assert r["updated"] == 150, r
    t = es.delete_by_query(index=index + "-copy", body={"query": {"range": {"n": {"gte": 0}}}},
                           wait_for_completion=False)
    done = es.tasks.get(task_id=t["task"], wait_for_completion=True)
    for _ in range(200):
        if done["completed"]:
            break
        time.sleep(0.05)
        done = es.tasks.get(task_id=t["task"])
    assert done["completed"] and done["response"]["deleted"] == 300, done
    es.indices.refresh(index=index + "-copy")
    assert es.count(index=index + "-copy")["count"] == 1
    es.delete(index=index, id="late", refresh=True)
    for extra in ("-copy", "-ten"):
        es.indices.delete(index=index + extra)
    assert es.count(index=index, body={"query": {"range": {"n": {"lt": 100}}}})["count"] == 101
    assert es.get(index=index, id="a")["_source"]["title"] == "hello shoal"
    assert es.delete(index=index, id="a", refresh=True)["result"] == "deleted"
    assert es.indices.delete(index=index)["acknowledged"] is True
    print("python elasticsearch flow: ok")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
