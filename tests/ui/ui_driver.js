// Drives the cluster page in a running headless Chromium for
// tests/api/test_ui.py: connects to it (puppeteer-core, DevTools
// protocol), opens the page, then answers one JSON command per stdin line
// with one JSON line on stdout. The Python test owns the browser process
// and the cluster; this script only looks and clicks.
//
//   node ui_driver.js WS_ENDPOINT PAGE_URL [USER PASSWORD]
'use strict';
const readline = require('readline');
const puppeteer = require('puppeteer-core');

const [wsEndpoint, pageUrl, user, password] = process.argv.slice(2);
const problems = [];  // console errors, page errors, failed requests
const weight = {};    // url -> bytes on the wire, for the page's own files

function out(obj) { process.stdout.write(JSON.stringify(obj) + '\n'); }

async function main() {
  const browser = await puppeteer.connect({ browserWSEndpoint: wsEndpoint, defaultViewport: null });
  // a context of its own: no credentials or cache shared with other drivers
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  await page.setViewport({ width: 1440, height: 1000, deviceScaleFactor: 1 });
  if (user) await page.authenticate({ username: user, password });
  page.on('console', (m) => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
  page.on('pageerror', (e) => problems.push('page error: ' + (e && e.message || e)));
  page.on('requestfailed', (r) => {
    // a poll cut short by navigation or by the test closing the page is not a page fault
    const f = r.failure();
    if (!f || f.errorText !== 'net::ERR_ABORTED') problems.push('request failed: ' + r.url() + ' ' + (f && f.errorText));
  });
  const cdp = await page.createCDPSession();
  await cdp.send('Network.enable');
  const urls = {};
  cdp.on('Network.responseReceived', (e) => { urls[e.requestId] = { url: e.response.url, type: e.type, status: e.response.status }; });
  cdp.on('Network.loadingFinished', (e) => {
    const u = urls[e.requestId];
    if (u && ['Document', 'Stylesheet', 'Script', 'Image', 'Font'].includes(u.type))
      weight[u.url] = (weight[u.url] || 0) + e.encodedDataLength;
  });
  const resp = await page.goto(pageUrl, { waitUntil: 'load', timeout: 30000 });

  const commands = {
    async status() { return { status: resp.status(), url: page.url(), title: await page.title() }; },
    // waits until the page has polled n more times
    async polls({ n, timeout }) {
      const start = await page.evaluate(() => Number(document.body.dataset.polls || 0));
      await page.waitForFunction((s, k) => Number(document.body.dataset.polls || 0) >= s + k,
        { timeout: timeout || 20000, polling: 100 }, start, n || 1);
      return { polls: start + (n || 1) };
    },
    // every copy tile of the shard grid, and every node row
    async grid() {
      return page.evaluate(() => ({
        tiles: Array.from(document.querySelectorAll('#grid .tile')).map((t) => ({
          index: t.dataset.index, shard: Number(t.dataset.shard), prirep: t.dataset.prirep,
          state: t.dataset.state, node: t.dataset.node || null, text: t.textContent,
          row: t.closest('tr').dataset.node || null,
        })),
        rows: Array.from(document.querySelectorAll('#grid tr.node-row')).map((r) => ({ node: r.dataset.node, up: r.dataset.up === 'true' })),
        health: document.getElementById('health').dataset.status,
        overview: Array.from(document.querySelectorAll('#overview .stat')).map((s) => [s.querySelector('.k').textContent, s.querySelector('.v').textContent]),
      }));
    },
    async recoveries() {
      return { rows: await page.evaluate(() => Array.from(document.querySelectorAll('#recovery-list tr.recovery')).map((r) => ({
        index: r.dataset.index, shard: Number(r.dataset.shard), target: r.dataset.target, stage: r.dataset.stage,
        bars: Array.from(r.querySelectorAll('[role=progressbar]')).map((b) => Number(b.getAttribute('aria-valuenow'))),
      }))) };
    },
    // clicks a tile and returns the detail panel's text
    async click({ index, shard, node, state }) {
      let sel = '#grid .tile[data-index="' + index + '"][data-shard="' + shard + '"]';
      if (node !== undefined) sel += '[data-node="' + (node || '') + '"]';
      if (state) sel += '[data-state="' + state + '"]';
      await page.click(sel);
      await page.waitForFunction(() => !document.getElementById('detail').hidden, { timeout: 5000 });
      return { text: await page.$eval('#detail', (d) => d.innerText) };
    },
    async nodes() {
      return page.evaluate(() => ({
        cards: Array.from(document.querySelectorAll('#node-list .node-card')).map((c) => ({ node: c.dataset.node, text: c.innerText })),
        rtt: Array.from(document.querySelectorAll('#rtt td[data-from]')).map((t) => ({ from: t.dataset.from, to: t.dataset.to, text: t.innerText })),
      }));
    },
    async latency() {
      return page.evaluate(() => ({
        counters: document.getElementById('fanout-counters').innerText,
        indices: Array.from(document.querySelectorAll('#latency-list .lat-index')).map((d) => ({
          index: d.dataset.index, rows: Array.from(d.querySelectorAll('tbody tr')).map((r) => Array.from(r.cells).slice(0, 6).map((c) => c.innerText)),
        })),
      }));
    },
    async console({ index, body }) {
      await page.select('#console-index', index);
      await page.$eval('#console-body', (t, b) => { t.value = b; }, body);
      await page.$eval('#console-result', (r) => { r.innerHTML = ''; });
      await page.click('#console-run');
      await page.waitForFunction(() => document.getElementById('console-result').innerHTML !== '', { timeout: 20000 });
      return page.evaluate(() => {
        const t = document.getElementById('console-total');
        return {
          total: t ? Number(t.textContent) : null,
          text: document.getElementById('console-result').innerText,
          shards: Array.from(document.querySelectorAll('#console-result table.timings tbody tr')).map((r) => Array.from(r.cells).slice(0, 5).map((c) => c.innerText)),
        };
      });
    },
    // a screenshot of one element, and how many distinct colours it has
    // upto: from the top of the page down to the end of that element
    async shot({ selector, path, upto }) {
      let buf;
      if (upto) {
        await page.evaluate(() => window.scrollTo(0, 0));
        const box = await (await page.$(upto)).boundingBox();
        buf = await page.screenshot({ path, type: 'png', clip: { x: 0, y: 0, width: 1440, height: Math.ceil(box.y + box.height + 12) } });
      } else {
        const el = await page.$(selector);
        await el.scrollIntoView();
        buf = await el.screenshot({ path, type: 'png' });
      }
      const p2 = await context.newPage();
      try {
        const info = await p2.evaluate(async (b64) => {
          const img = new Image();
          img.src = 'data:image/png;base64,' + b64;
          await img.decode();
          const c = document.createElement('canvas');
          c.width = img.width; c.height = img.height;
          const g = c.getContext('2d');
          g.drawImage(img, 0, 0);
          const d = new Uint32Array(g.getImageData(0, 0, c.width, c.height).data.buffer);
          return { width: c.width, height: c.height, colours: new Set(d).size };
        }, Buffer.from(buf).toString('base64'));
        return Object.assign({ bytes: buf.length }, info);
      } finally {
        await p2.close();
      }
    },
    async text({ selector }) { return { text: await page.$eval(selector, (e) => e.innerText) }; },
    async problems() { return { problems: Array.from(new Set(problems)).slice(0, 20), count: problems.length }; },
    async weight() { return { weight, total: Object.values(weight).reduce((a, b) => a + b, 0) }; },
    async close() { await context.close(); await browser.disconnect(); return {}; },
  };

  out({ ok: true, ready: true, status: resp.status() });
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    if (!line.trim()) continue;
    let cmd;
    try { cmd = JSON.parse(line); } catch (e) { out({ ok: false, error: 'bad command: ' + line }); continue; }
    try {
      const res = await commands[cmd.cmd](cmd);
      out(Object.assign({ ok: true }, res));
      if (cmd.cmd === 'close') break;
    } catch (e) {
      out({ ok: false, error: String(e && e.stack || e) });
    }
  }
  process.exit(0);
}

main().catch((e) => { out({ ok: false, error: String(e && e.stack || e) }); process.exit(1); });
