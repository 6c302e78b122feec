// The Elasticsearch JavaScript client 8.x, unmodified, against a Shoal
// node: it sends versioned media types (compatible-with=8) and refuses
// any reply without "X-Elastic-Product: Elasticsearch". Info, create with
// an alias, bulk helper, search with fields and docvalue_fields, count,
// aliases, an index template picked up on auto-creation, get, delete.
// Usage: node elastic8_flow.js http://127.0.0.1:PORT
'use strict';
const assert = require('assert');
const { Client } = require('@elastic/elasticsearch');

async function main() {
  const client = new Client({ node: process.argv[2] });
  const index = 'es8-flow';

  const info = await client.info();
  assert.strictEqual(info.tagline, 'You Know, for Search');

  let r = await client.indices.create({
    index,
    settings: { number_of_shards: 2, number_of_replicas: 0 },
    mappings: { properties: { title: { type: 'text' }, n: { type: 'long' }, at: { type: 'date' } } },
    aliases: { 'es8-alias': {} },
  });
  assert.strictEqual(r.acknowledged, true);

  const docs = [];
  for (let i = 0; i < 100; i++) {
    docs.push({ id: `d${i}`, title: i % 2 ? 'odd fish' : 'even fish', n: i, at: `2026-12-01T00:00:${String(i % 60).padStart(2, '0')}Z` });
  }
  const stats = await client.helpers.bulk({
    datasource: docs,
    onDocument(doc) { return { index: { _index: 'es8-alias', _id: doc.id } }; },
    refreshOnCompletion: index,
  });
  assert.strictEqual(stats.failed, 0);
  assert.strictEqual(stats.successful, 100);

  r = await client.search({
    index: 'es8-alias',
    query: { term: { n: 7 } },
    fields: [{ field: 'at', format: 'epoch_millis' }, 'n'],
    docvalue_fields: ['n'],
    _source: false,
  });
  assert.strictEqual(r.hits.total.value, 1);
  assert.deepStrictEqual(r.hits.hits[0].fields, { at: [String(Date.UTC(2026, 11, 1, 0, 0, 7))], n: [7] });

  r = await client.count({ index, query: { match: { title: 'odd' } } });
  assert.strictEqual(r.count, 50);

  r = await client.indices.getAlias({ name: 'es8-alias' });
  assert.deepStrictEqual(r, { [index]: { aliases: { 'es8-alias': {} } } });
  r = await client.indices.updateAliases({ actions: [{ add: { index, alias: 'es8-odd', filter: { term: { title: 'odd' } } } }] });
  assert.strictEqual(r.acknowledged, true);
  r = await client.search({ index: 'es8-odd', size: 0 });
  assert.strictEqual(r.hits.total.value, 50);

  r = await client.indices.putIndexTemplate({
    name: 'es8-tpl', index_patterns: ['es8-auto-*'], priority: 5,
    template: { mappings: { properties: { code: { type: 'keyword' } } } },
  });
  assert.strictEqual(r.acknowledged, true);
  await client.index({ index: 'es8-auto-1', id: 'x', document: { code: 'A-1' }, refresh: true });
  r = await client.indices.getMapping({ index: 'es8-auto-1' });
  assert.deepStrictEqual(r['es8-auto-1'].mappings.properties.code, { type: 'keyword' });

  r = await client.get({ index, id: 'd3' });
  assert.strictEqual(r._source.n, 3);
  r = await client.delete({ index, id: 'd3', refresh: true });
  assert.strictEqual(r.result, 'deleted');
  await client.indices.delete({ index: 'es8-auto-1' });
  await client.indices.deleteIndexTemplate({ name: 'es8-tpl' });
  r = await client.indices.delete({ index });
  assert.strictEqual(r.acknowledged, true);
  console.log('elasticsearch-js 8 flow: ok');
}

main().catch((e) => { console.error('elasticsearch-js 8 flow failed:', e.meta ? JSON.stringify(e.meta.body) : e); process.exit(1); });
