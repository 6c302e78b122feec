// The OpenSearch JavaScript client, unmodified, against a Shoal node:
// create an index, index, bulk helper, search, scroll helper, count, delete.
// Usage: node opensearch_flow.js http://127.0.0.1:PORT
'use strict';
const assert = require('assert');
const { Client } = require('@opensearch-project/opensearch');

async function main() {
  const client = new Client({ node: process.argv[2] });
  const index = 'js-flow';

  let r = await client.indices.create({
    index,
    body: { settings: { number_of_shards: 2, number_of_replicas: 0 },
            mappings: { properties: { title: { type: 'text' }, n: { type: 'long' } } } },
  });
  assert.strictEqual(r.body.acknowledged, true);

  r = await client.index({ index, id: 'a', body: { title: 'hello shoal', n: 1 }, refresh: true });
  assert.strictEqual(r.body.result, 'created');

  const docs = [];
  for (let i = 0; i < 200; i++) docs.push({ id: `d${i}`, title: i % 2 ? 'odd fish' : 'even fish', n: i });
  const stats = await client.helpers.bulk({
    datasource: docs,
    onDocument(doc) { return { index: { _index: index, _id: doc.id } }; },
    refreshOnCompletion: index,
  });
  assert.strictEqual(stats.failed, 0);
  assert.strictEqual(stats.successful, 200);

  r = await client.search({ index, body: { query: { match: { title: 'odd' } }, size: 5 } });
  assert.strictEqual(r.body.hits.total.value, 100);
  assert.strictEqual(r.body.hits.hits.length, 5);

  let seen = 0;
  const scroll = client.helpers.scrollDocuments({
    index, scroll: '1m', size: 50, body: { query: { match: { title: 'fish' } } } });
  for await (const doc of scroll) { assert.ok(doc.title.endsWith('fish')); seen++; }
  assert.strictEqual(seen, 200);

  r = await client.count({ index, body: { query: { range: { n: { gte: 100 } } } } });
  assert.strictEqual(r.body.count, 100);

  r = await client.get({ index, id: 'a' });
  assert.strictEqual(r.body._source.title, 'hello shoal');
  r = await client.delete({ index, id: 'a', refresh: true });
  assert.strictEqual(r.body.result, 'deleted');
  r = await client.indices.delete({ index });
  assert.strictEqual(r.body.acknowledged, true);
  console.log('opensearch-js flow: ok');
}

main().catch((e) => { console.error('opensearch-js flow failed:', e.meta ? JSON.stringify(e.meta.body) : e); process.exit(1); });
