// The Elasticsearch JavaScript client 8.x scroll helpers, unmodified,
// against a Shoal node (issue #11): helpers.scrollDocuments (filter_path
// hits.hits._source,_scroll_id on the first page) and helpers.scrollSearch
// (pages, documents getter, rest_total_hits_as_int, an early clear(), a
// slice with more slices than shards), each document exactly once, and no
// search context left open afterwards on any node.
// Usage: node elastic8_scroll_flow.js http://127.0.0.1:PORT
'use strict';
const assert = require('assert');
const { Client } = require('@elastic/elasticsearch');

const DOCS = 2500;

function exactlyOnce(ns, what) {
  assert.strictEqual(ns.length, DOCS, `${what}: ${ns.length} documents`);
  const seen = new Set(ns);
  assert.strictEqual(seen.size, DOCS, `${what}: duplicates`);
  for (let i = 0; i < DOCS; i++) assert.ok(seen.has(i), `${what}: missing ${i}`);
}

async function openContexts(client) {
  const r = await client.nodes.stats();
  let open = 0;
  for (const n of Object.values(r.nodes)) open += n.indices.search.open_contexts;
  return open;
}

async function main() {
  const client = new Client({ node: process.argv[2] });
  const index = 'es8-scroll';

  await client.indices.delete({ index }, { ignore: [404] });
  let r = await client.indices.create({
    index,
    settings: { number_of_shards: 3, number_of_replicas: 0 },
    mappings: { properties: { n: { type: 'long' }, k: { type: 'keyword' } } },
  });
  assert.strictEqual(r.acknowledged, true);
  const docs = [];
  for (let i = 0; i < DOCS; i++) docs.push({ n: i, k: i % 3 ? 'x' : 'y' });
  const stats = await client.helpers.bulk({
    datasource: docs,
    onDocument(doc) { return { index: { _index: index, _id: `d${doc.n}` } }; },
    refreshOnCompletion: index,
  });
  assert.strictEqual(stats.successful, DOCS);

  // scrollDocuments: the _source of every document, page after page
  let ns = [];
  for await (const doc of client.helpers.scrollDocuments({ index, size: 200, sort: ['_doc'] })) {
    assert.deepStrictEqual(Object.keys(doc).sort(), ['k', 'n']);
    ns.push(doc.n);
  }
  exactlyOnce(ns, 'scrollDocuments');

  // scrollSearch: whole responses, with a query and int totals
  ns = [];
  let pages = 0;
  for await (const resp of client.helpers.scrollSearch({
    index, size: 150, query: { term: { k: 'y' } }, rest_total_hits_as_int: true,
  })) {
    assert.strictEqual(resp.body.hits.total, Math.ceil(DOCS / 3));
    assert.ok(resp.body._scroll_id);
    for (const d of resp.documents) ns.push(d.n);
    pages++;
  }
  assert.strictEqual(ns.length, Math.ceil(DOCS / 3));
  assert.strictEqual(new Set(ns).size, ns.length);
  assert.ok(pages >= 6, `pages: ${pages}`);

  // an early clear(): the scroll's contexts are freed
  pages = 0;
  for await (const resp of client.helpers.scrollSearch({ index, size: 10 })) {
    pages++;
    if (pages === 2) await resp.clear();
  }
  assert.strictEqual(pages, 2);
  assert.strictEqual(await openContexts(client), 0, 'contexts left after clear()');

  // 5 slices over 3 shards, scrolled side by side: each document once
  const slices = [];
  for (let id = 0; id < 5; id++) {
    slices.push((async () => {
      const got = [];
      for await (const doc of client.helpers.scrollDocuments({
        index, size: 100, slice: { id, max: 5 }, sort: ['_doc'],
      })) got.push(doc.n);
      return got;
    })());
  }
  const parts = await Promise.all(slices);
  for (const p of parts) assert.ok(p.length > 0 && p.length < DOCS, `slice of ${p.length}`);
  exactlyOnce([].concat(...parts), 'sliced scrollDocuments');

  assert.strictEqual(await openContexts(client), 0, 'contexts left at the end');
  await client.indices.delete({ index });
  console.log('elasticsearch-js 8 scroll flow: ok');
}

main().catch((e) => { console.error('elasticsearch-js 8 scroll flow failed:', e.meta ? JSON.stringify(e.meta.body) : e); process.exit(1); });
