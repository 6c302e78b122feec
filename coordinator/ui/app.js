// The Shoal cluster page: polls the node that served it every 2 s and
// renders the overview, the shard grid, recoveries, nodes, search latency
// and a search console. Plain DOM, no libraries, nothing from elsewhere.
// Credentials: the browser's own sign-in (HTTP Basic, cached for the
// origin); the page never puts one in a URL or in storage.
'use strict';

const REFRESH_MS = 2000;
const $ = (id) => document.getElementById(id);
const S = {
  selected: null,     // key of the clicked copy
  cpuPrev: {},        // node -> {cpu, t}
  recPrev: {},        // recovery key -> {bytes, ops, t}
  last: null,         // the latest poll's replies
  indexChoice: null,  // the console's index
};

// ---- formatting ----
function esc(s) {
  return String(s == null ? '' : s).replace(/[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}
function fmtNum(n) { return n == null || isNaN(n) ? '–' : Number(n).toLocaleString('en-US'); }
function fmtBytes(b) {
  if (b == null || isNaN(b)) return '–';
  const u = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0; b = Number(b);
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return (i === 0 ? b.toFixed(0) : b.toFixed(b < 10 ? 1 : 0)) + ' ' + u[i];
}
function fmtUs(us) {
  if (us == null || isNaN(us)) return '–';
  if (us < 1000) return Math.round(us) + ' µs';
  if (us < 1e6) return (us / 1000).toFixed(us < 10000 ? 2 : 1) + ' ms';
  return (us / 1e6).toFixed(2) + ' s';
}
function fmtDur(s) {
  if (s == null || isNaN(s)) return '–';
  if (s < 60) return s.toFixed(1) + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min ' + Math.round(s % 60) + ' s';
  if (s < 86400) return (s / 3600).toFixed(1) + ' h';
  return (s / 86400).toFixed(1) + ' d';
}
function pct(x) { return Math.max(0, Math.min(100, x)); }

// ---- HTTP ----
async function call(method, path, body) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 10000);
  try {
    const opts = { method, headers: { Accept: 'application/json' }, signal: ctl.signal, cache: 'no-store' };
    if (body != null) { opts.body = body; opts.headers['Content-Type'] = 'application/json'; }
    const r = await fetch(path, opts);
    const text = await r.text();
    let json = null;
    try { json = text ? JSON.parse(text) : null; } catch (e) { json = null; }
    return { status: r.status, body: json, text };
  } catch (e) {
    return { status: 0, body: null, text: String(e && e.message || e) };
  } finally {
    clearTimeout(timer);
  }
}
const get = (path) => call('GET', path);

function reason(rep) {
  const e = rep && rep.body && rep.body.error;
  if (e && typeof e === 'object') return e.reason || e.type;
  if (rep && rep.status === 0) return 'the node did not answer (' + rep.text + ')';
  return 'HTTP ' + (rep ? rep.status : '?');
}

// A panel that cannot be filled says why instead.
function refusal(rep) {
  if (rep.status === 403)
    return '<p class="forbidden">Your role may not read this: ' + esc(reason(rep)) + '</p>';
  if (rep.status === 401)
    return '<p class="forbidden">Not signed in: reload the page to sign in.</p>';
  return '<p class="err">' + esc(reason(rep)) + '</p>';
}

function banner(text, error) {
  const b = $('banner');
  if (!text) { b.hidden = true; return; }
  b.hidden = false;
  b.className = 'banner' + (error ? ' error' : '');
  b.textContent = text;
}

// The page's CSP refuses style attributes in markup; sizes and positions
// travel as data-css and are set through the CSSOM, which it allows.
function applyCss(root) {
  root.querySelectorAll('[data-css]').forEach((e) => { e.style.cssText = e.dataset.css; });
}
function setHtml(el, html) { el.innerHTML = html; applyCss(el); }

// ---- the model: one poll's replies joined ----
function buildModel(rep) {
  const m = { nodes: [], shards: [], indices: [], stats: {}, dataNodes: [] };
  const catNodes = rep.nodes.status === 200 && Array.isArray(rep.nodes.body) ? rep.nodes.body : [];
  const statNodes = rep.stats.status === 200 && rep.stats.body && Array.isArray(rep.stats.body.nodes)
    ? rep.stats.body.nodes : [];
  for (const n of statNodes) m.stats[n.name] = n;
  for (const n of catNodes) {
    const role = n['node.role'] || '-';
    m.nodes.push({
      name: n.name, up: n.status === 'up', master: n.master === '*',
      data: role.includes('d'), roleText: role, latency: Number(n.latency_us),
      self: n.transport === 'self', stat: m.stats[n.name] || null,
    });
  }
  m.dataNodes = m.nodes.filter((n) => n.data).map((n) => n.name);
  const rows = rep.shards.status === 200 && Array.isArray(rep.shards.body) ? rep.shards.body : [];
  const byIndex = {};
  for (const r of rows) {
    const st = r.node ? m.stats[r.node] : null;
    const sh = st && st.shards && st.shards[r.index] ? st.shards[r.index][Number(r.shard)] : null;
    const c = {
      index: r.index, shard: Number(r.shard), prirep: r.prirep, state: r.state,
      docs: r.docs == null ? null : Number(r.docs), node: r.node || null,
      bytes: sh ? sh.store_bytes : null,
    };
    m.shards.push(c);
    (byIndex[c.index] = byIndex[c.index] || []).push(c);
  }
  for (const name of Object.keys(byIndex).sort()) {
    const copies = byIndex[name];
    const nshards = copies.reduce((a, c) => Math.max(a, c.shard + 1), 0);
    let docs = 0, bytes = 0;
    for (let s = 0; s < nshards; s++) {
      const live = copies.filter((c) => c.shard === s && c.state === 'STARTED' && c.docs != null);
      const p = live.find((c) => c.prirep === 'p') || live[0];
      if (p) docs += p.docs;
    }
    for (const c of copies) if (c.node && c.bytes != null) bytes += c.bytes;
    m.indices.push({ name, nshards, copies: copies.length / Math.max(1, nshards), docs, bytes,
      started: copies.filter((c) => c.state === 'STARTED').length, total: copies.length });
  }
  // Placement is static (docs/operations.md): copy c of shard s lives on
  // data node (s + c) mod N. An unassigned copy's home is the placed node
  // that holds no live copy of that shard.
  const ndata = m.dataNodes.length;
  for (const ix of m.indices) {
    for (let s = 0; s < ix.nshards; s++) {
      const copies = m.shards.filter((c) => c.index === ix.name && c.shard === s);
      const homes = [];
      for (let c = 0; c < copies.length && ndata; c++) homes.push(m.dataNodes[(s + c) % ndata]);
      const held = new Set(copies.filter((c) => c.node).map((c) => c.node));
      const free = homes.filter((h) => !held.has(h));
      for (const c of copies) if (!c.node) c.home = free.shift() || null;
    }
  }
  m.recoveries = [];
  for (const n of statNodes)
    (n.recoveries || []).forEach((r, i) => m.recoveries.push(Object.assign({ seq: i, reporter: n.name }, r)));
  return m;
}

function copyKey(c) { return c.index + '/' + c.shard + '/' + c.prirep + '/' + (c.node || 'unassigned:' + (c.home || '')); }

// ---- overview ----
function renderOverview(rep, m) {
  const h = rep.health.status === 200 || rep.health.status === 408 ? rep.health.body : null;
  const status = h ? h.status : 'unknown';
  $('cluster-name').textContent = h ? h.cluster_name : (rep.stats.body && rep.stats.body.cluster_name) || '';
  const pill = $('health');
  pill.textContent = status;
  pill.className = 'pill pill-' + (['green', 'yellow', 'red'].includes(status) ? status : 'unknown');
  pill.dataset.status = status;
  const st = $('ov-status');
  st.textContent = status;
  st.className = 'v s-' + status;
  const master = m.nodes.find((n) => n.master);
  $('ov-master').textContent = master ? master.name + (master.up ? '' : ' (down)') : '–';
  $('ov-nodes').textContent = h ? h.number_of_nodes + ' / ' + m.nodes.length : m.nodes.length;
  $('ov-indices').textContent = m.indices.length;
  $('ov-shards').textContent = h ? h.active_shards + ' / ' + (h.active_shards + h.initializing_shards + h.unassigned_shards) : '–';
  $('ov-docs').textContent = fmtNum(m.indices.reduce((a, i) => a + i.docs, 0));
  $('ov-store').textContent = fmtBytes(m.indices.reduce((a, i) => a + i.bytes, 0));
  const f = rep.fanout.status === 200 && rep.fanout.body ? rep.fanout.body.indices || {} : null;
  $('ov-searches').textContent = f ? fmtNum(Object.values(f).reduce((a, x) => a + (x.coordinator ? x.coordinator.count : 0), 0)) : '–';
  const sb = rep.stats.body;
  if (sb && sb.self) $('served-by').textContent = sb.self;
  const sec = sb && sb.security;
  $('whoami').textContent = !sec ? '' : sec.enabled ? 'signed in as ' + sec.user + ' (' + sec.role + ')' : 'security off';
  if (h) document.title = h.cluster_name + ' · ' + status + ' · Shoal';
}

// ---- shard grid ----
function tile(c, sel) {
  const pr = c.prirep === 'p' ? 'primary' : 'replica';
  const meta = c.state === 'UNASSIGNED'
    ? (c.home ? 'home ' + esc(c.home) : 'no node')
    : (c.docs == null ? '' : fmtNum(c.docs) + ' docs') + (c.bytes != null ? ' · ' + fmtBytes(c.bytes) : '');
  return '<button type="button" class="tile ' + pr + ' s-' + esc(c.state) + (sel ? ' selected' : '') +
    '" data-key="' + esc(copyKey(c)) + '" data-index="' + esc(c.index) + '" data-shard="' + c.shard +
    '" data-prirep="' + esc(c.prirep) + '" data-state="' + esc(c.state) + '" data-node="' + esc(c.node || '') +
    '" title="' + esc(c.index + ' shard ' + c.shard + ' ' + pr + ': ' + c.state) + '">' +
    '<span class="sh">' + c.shard + '</span><span class="pr">' + (c.prirep === 'p' ? 'P' : 'R') + '</span>' +
    '<span class="state">' + esc(c.state) + '</span><span class="meta">' + meta + '</span></button>';
}

function renderGrid(rep, m) {
  const g = $('grid');
  if (rep.shards.status !== 200) { setHtml(g, refusal(rep.shards)); return; }
  if (!m.indices.length) { setHtml(g, '<p class="muted">No indices yet.</p>'); return; }
  let h = '<table class="grid"><thead><tr><th>node</th>';
  for (const ix of m.indices)
    h += '<th class="idx-head" data-index="' + esc(ix.name) + '"><div class="name">' + esc(ix.name) + '</div>' +
      ix.nshards + ' shards × ' + ix.copies + ' · ' + fmtNum(ix.docs) + ' docs · ' + fmtBytes(ix.bytes) + '</th>';
  h += '</tr></thead><tbody>';
  const rowFor = (label, cls, attrs, pick) => {
    let r = '<tr class="' + cls + '" ' + attrs + '>' + label;
    for (const ix of m.indices) {
      const cs = m.shards.filter((c) => c.index === ix.name && pick(c)).sort((a, b) => a.shard - b.shard || (a.prirep < b.prirep ? -1 : 1));
      r += '<td><div class="tiles">' + cs.map((c) => tile(c, S.selected === copyKey(c))).join('') + '</div></td>';
    }
    return r + '</tr>';
  };
  for (const n of m.nodes) {
    const st = n.stat;
    const sub = (n.up ? 'up' : 'down') + (n.roleText ? ' · ' + esc(roleName(n.roleText)) : '') +
      (st && st.process ? ' · ' + fmtBytes(st.process.rss_bytes) + ' rss' : '');
    const label = '<td class="node"><span class="' + (n.up ? 'up-dot' : 'down-dot') + '"></span> ' +
      (n.master ? '<span class="star" title="master">★</span> ' : '') + '<span class="name">' + esc(n.name) +
      '</span><div class="muted small">' + sub + '</div></td>';
    h += rowFor(label, 'node-row' + (n.up ? '' : ' down'), 'data-node="' + esc(n.name) + '" data-up="' + n.up + '"',
      (c) => c.node === n.name);
  }
  if (m.shards.some((c) => !c.node))
    h += rowFor('<td class="node"><span class="down-dot"></span> <span class="name">unassigned</span></td>',
      'unassigned', 'data-node=""', (c) => !c.node);
  setHtml(g, h + '</tbody></table>');
  renderDetail(m);
}

function roleName(r) {
  return r === 'dm' ? 'data, master' : r === 'd' ? 'data' : r === 'm' ? 'master' : 'coordinator';
}

function recoveryRows(m, c) {
  return m.recoveries.filter((r) => r.index === c.index && Number(r.shard) === c.shard &&
    (c.node ? r.target === c.node : !c.home || r.target === c.home));
}

function renderDetail(m) {
  const d = $('detail');
  const c = S.selected && m.shards.find((x) => copyKey(x) === S.selected);
  if (!c) { d.hidden = true; return; }
  d.hidden = false;
  let h = '<h3>' + esc(c.index) + ' · shard ' + c.shard + ' · ' + (c.prirep === 'p' ? 'primary' : 'replica') + '</h3><dl>' +
    '<dt>state</dt><dd>' + esc(c.state) + '</dd><dt>node</dt><dd>' + esc(c.node || '(none)') + '</dd>' +
    '<dt>documents</dt><dd>' + fmtNum(c.docs) + '</dd><dt>store</dt><dd>' + fmtBytes(c.bytes) + '</dd></dl>';
  const recs = recoveryRows(m, c);
  if (recs.length) {
    h += '<h3>Recovery of this copy</h3>' + recoveryTable(m, recs.slice(-3).reverse());
  } else if (c.state === 'STARTED') {
    h += '<p class="muted">No recovery recorded for this copy on its node since it started (it opened from its own data).</p>';
  }
  if (c.state === 'UNASSIGNED') {
    const home = c.home && m.nodes.find((n) => n.name === c.home);
    h += '<h3>Why unassigned</h3><p>' + (home
      ? 'Its home is <b>' + esc(home.name) + '</b>, which is ' + (home.up ? 'up but has not started the copy yet' : '<b>not reachable</b>') +
        '. It recovers from the primary when the node is back.'
      : 'No live data node is its home.') + '</p>' +
      '<p class="muted small">Placement is static (copy c of shard s on data node (s + c) mod N); copies are never moved to another node, and Shoal has no <code>_cluster/allocation/explain</code> yet: this is what <code>_cat/nodes</code> and <code>_cat/shards</code> tell.</p>';
  } else if (c.state === 'INITIALIZING') {
    h += '<p class="muted">The copy is outside the in-sync set: it is recovering (or about to) from the primary.</p>';
  }
  setHtml(d, h);
}

// ---- recoveries ----
function recKey(r) { return r.index + '/' + r.shard + '/' + r.source + '/' + r.target + '/' + r.seq; }
function running(r) { return r.stage !== 'done' && r.stage !== 'failed'; }

// Replication records how much a recovery moved but not the total it will
// move: the bars measure against the primary's docs and bytes now.
function primaryOf(m, r) {
  return m.shards.find((c) => c.index === r.index && c.shard === Number(r.shard) && c.node === r.source) ||
    m.shards.find((c) => c.index === r.index && c.shard === Number(r.shard) && c.prirep === 'p' && c.node);
}

function progress(label, done, total, finished, failed) {
  let p = finished ? 100 : total > 0 ? pct(100 * done / total) : 0;
  if (!finished && p >= 100) p = 99;
  const cls = failed ? 'bar failed' : finished ? 'bar done' : 'bar';
  return '<div class="prog"><div class="' + cls + '" role="progressbar" aria-label="' + label +
    '" aria-valuemin="0" aria-valuemax="100" aria-valuenow="' + Math.round(p) + '"><span data-css="width:' + p.toFixed(1) +
    '%"></span></div><span class="lbl">' + label + '</span></div>';
}

function recoveryTable(m, rows) {
  const now = Date.now();
  let h = '<table class="recs"><thead><tr><th>shard</th><th>source → target</th><th>type</th><th>stage</th>' +
    '<th>bytes</th><th>operations</th><th class="num">time</th><th class="num">throughput</th></tr></thead><tbody>';
  for (const r of rows) {
    const prim = primaryOf(m, r);
    const fin = !running(r), failed = r.stage === 'failed';
    const key = recKey(r), prev = S.recPrev[key];
    let rate = r.time_s > 0 ? r.bytes / r.time_s : 0, orate = r.time_s > 0 ? r.ops / r.time_s : 0;
    if (!fin && prev && now > prev.t) {
      rate = (r.bytes - prev.bytes) * 1000 / (now - prev.t);
      orate = (r.ops - prev.ops) * 1000 / (now - prev.t);
    }
    const bytesLbl = fmtBytes(r.bytes) + (prim && prim.bytes != null ? ' of ≈' + fmtBytes(prim.bytes) : '');
    const opsLbl = fmtNum(r.ops) + (prim && prim.docs != null ? ' of ≤' + fmtNum(prim.docs) : '') + ' ops';
    h += '<tr class="recovery" data-index="' + esc(r.index) + '" data-shard="' + r.shard + '" data-target="' + esc(r.target) +
      '" data-stage="' + esc(r.stage) + '"><td><b>' + esc(r.index) + '</b> / ' + r.shard + '</td><td>' + esc(r.source) +
      ' → ' + esc(r.target) + '</td><td>' + esc(String(r.type || '').replace('_', '-')) + '</td><td><span class="badge ' +
      (failed ? 'failed' : fin ? 'done' : 'running') + '">' + esc(r.stage) + '</span></td><td>' +
      progress(bytesLbl, r.bytes, prim ? prim.bytes : 0, fin, failed) + '</td><td>' +
      progress(opsLbl, r.ops, prim ? prim.docs : 0, fin, failed) + '</td><td class="num">' + fmtDur(r.time_s) +
      '</td><td class="num">' + fmtBytes(Math.max(0, rate)) + '/s<br><span class="muted small">' + fmtNum(Math.round(Math.max(0, orate))) +
      ' ops/s</span></td></tr>';
  }
  return h + '</tbody></table>';
}

function renderRecoveries(rep, m) {
  const el = $('recovery-list');
  if (rep.stats.status !== 200) { setHtml(el, refusal(rep.stats)); return; }
  const live = m.recoveries.filter(running);
  const done = m.recoveries.filter((r) => !running(r)).reverse().slice(0, 6);
  let h = live.length ? '' : '<p class="muted">No recovery running.</p>';
  if (live.length) h += recoveryTable(m, live);
  if (done.length) h += '<h3>Finished <span class="muted small">(newest first, as each target node logged them)</span></h3>' + recoveryTable(m, done);
  setHtml(el, h);
  const now = Date.now();
  for (const r of m.recoveries) S.recPrev[recKey(r)] = { bytes: r.bytes, ops: r.ops, t: now };
}

// ---- nodes ----
function memStack(mem) {
  const mods = ['common', 'storage', 'search', 'replication', 'node', 'coordinator'];
  const total = mem.total || 1;
  let bar = '<div class="stack" title="accounted memory per module">', leg = '<div class="mem-legend">';
  for (const k of mods) {
    if (mem[k] == null) continue;
    bar += '<span class="m-' + k + '" data-css="width:' + pct(100 * mem[k] / total).toFixed(1) + '%"></span>';
    leg += '<span><i class="m-' + k + '"></i>' + k + ' ' + fmtBytes(mem[k]) + '</span>';
  }
  return bar + '</div>' + leg + '</div>';
}

function renderNodes(rep, m) {
  const el = $('node-list');
  if (rep.stats.status !== 200) { setHtml(el, refusal(rep.stats)); setHtml($('rtt'), ''); return; }
  let h = '';
  for (const n of m.nodes) {
    const st = n.stat && n.stat.alive ? n.stat : null;
    h += '<div class="node-card' + (n.up ? '' : ' down') + '" data-node="' + esc(n.name) + '"><div class="title"><span class="' +
      (n.up ? 'up-dot' : 'down-dot') + '"></span><span class="name">' + esc(n.name) + '</span>' +
      (n.master ? '<span class="star" title="master">★ master</span>' : '') + '<span class="roles">' + esc(roleName(n.roleText)) +
      (n.self ? ' · serves this page' : '') + '</span></div>';
    if (!st) {
      h += '<div class="muted">' + esc(n.stat && n.stat.error ? n.stat.error : 'not reachable') + '</div></div>';
      continue;
    }
    const prev = S.cpuPrev[n.name];
    let cpu = null;
    if (prev && st.timestamp > prev.t) cpu = 100 * (st.process.cpu_seconds - prev.cpu) / ((st.timestamp - prev.t) / 1000);
    S.cpuPrev[n.name] = { cpu: st.process.cpu_seconds, t: st.timestamp };
    const disk = st.disk || {};
    const used = disk.total_bytes ? disk.total_bytes - disk.available_bytes : null;
    h += '<div class="kv">' +
      '<span class="k">cpu</span><span>' + (cpu == null ? '…' : Math.max(0, cpu).toFixed(0) + '% of a core') +
      ' <span class="muted small">(' + st.process.cpus + ' cpus, ' + fmtDur(st.process.cpu_seconds) + ' used)</span></span>' +
      '<span class="k">memory</span><span>' + fmtBytes(st.process.rss_bytes) + ' rss · ' + fmtBytes(st.memory.total) + ' accounted</span>' +
      '<span class="k"></span><span>' + memStack(st.memory) + '</span>' +
      '<span class="k">disk</span><span>' + (used == null ? '–' : '<div class="bar" title="' + fmtBytes(used) + ' used of ' +
        fmtBytes(disk.total_bytes) + '"><span data-css="width:' + pct(100 * used / disk.total_bytes).toFixed(1) + '%"></span></div>' +
        '<span class="small">' + fmtBytes(disk.available_bytes) + ' free of ' + fmtBytes(disk.total_bytes) + ' · shards ' +
        fmtBytes(disk.shoal_bytes) + '</span>') + '</span>' +
      '<span class="k">search</span><span>' + st.search.in_flight + ' in flight · ' + fmtNum(st.search.rejected) + ' rejected</span>' +
      '<span class="k">http</span><span>' + st.http.current_open + ' open · ' + fmtNum(st.http.requests_total) + ' requests</span>' +
      '<span class="k">uptime</span><span>' + fmtDur(st.uptime_s) + '</span></div></div>';
  }
  setHtml(el, h);
  // the round-trip matrix: each row is one node's view of its peers
  const names = m.nodes.map((n) => n.name);
  let t = '<table class="rtt"><thead><tr><th>from \\ to</th>' + names.map((x) => '<th>' + esc(x) + '</th>').join('') + '</tr></thead><tbody>';
  for (const n of m.nodes) {
    const st = n.stat && n.stat.alive ? n.stat : null;
    t += '<tr><th>' + esc(n.name) + '</th>';
    for (const to of names) {
      if (to === n.name) { t += '<td class="self">·</td>'; continue; }
      const p = st && (st.peers || []).find((x) => x.name === to);
      t += '<td data-from="' + esc(n.name) + '" data-to="' + esc(to) + '">' + (!p ? '–' : !p.alive ? '<span class="err">down</span>' :
        p.rtt_us > 0 ? fmtUs(p.rtt_us) : '<span class="muted">no traffic yet</span>') + '</td>';
    }
    t += '</tr>';
  }
  setHtml($('rtt'), t + '</tbody></table>');
}

// ---- search latency ----
function renderLatency(rep) {
  const el = $('latency-list');
  if (rep.fanout.status !== 200) { setHtml(el, refusal(rep.fanout)); setHtml($('fanout-counters'), ''); return; }
  const f = rep.fanout.body, fc = f.fanout;
  const counter = (v, label) => '<span class="counter"><b>' + esc(v) + '</b>' + esc(label) + '</span>';
  setHtml($('fanout-counters'), counter(fc.default, 'default fan-out') +
    counter(fmtNum(fc.searches.serial), 'serial') + counter(fmtNum(fc.searches.per_shard), 'per_shard') +
    counter(fmtNum(fc.searches.per_node), 'per_node') + counter(fmtNum(fc.shard_requests.local), 'local shard runs') +
    counter(fmtNum(fc.shard_requests.remote), 'remote shard requests') + counter(fmtNum(fc.messages), 'messages') +
    counter(fmtNum(fc.in_flight), 'in flight'));
  const names = Object.keys(f.indices).sort();
  const live = names.filter((n) => f.indices[n].coordinator.count > 0 ||
    Object.values(f.indices[n].copies).some((c) => c.count > 0));
  if (!live.length) { setHtml(el, '<p class="muted">No searches through this node in the last minute. Run one in the console below.</p>'); return; }
  // one log scale for the whole panel
  let lo = Infinity, hi = 0;
  for (const n of live) {
    for (const h of [f.indices[n].coordinator].concat(Object.values(f.indices[n].copies))) {
      if (!h.count) continue;
      lo = Math.min(lo, h.buckets.length ? h.buckets[0][0] : h.p50_us);
      hi = Math.max(hi, h.max_us);
    }
  }
  const d0 = Math.floor(Math.log10(Math.max(1, lo))), d1 = Math.max(d0 + 1, Math.ceil(Math.log10(Math.max(10, hi * 1.05))));
  const x = (us) => pct(100 * (Math.log10(Math.max(1, us)) - d0) / (d1 - d0));
  let ticks = '<div class="ticks">';
  const tick = (d) => d < 3 ? Math.pow(10, d) + ' µs' : d < 6 ? Math.pow(10, d - 3) + ' ms' : Math.pow(10, d - 6) + ' s';
  for (let d = d0; d <= d1; d++) ticks += '<span data-css="left:' + x(Math.pow(10, d)) + '%">' + tick(d) + '</span>';
  ticks += '</div>';
  const scale = (h) => {
    if (!h.count) return '<div class="lscale"></div>';
    const peak = h.buckets.reduce((a, b) => Math.max(a, b[2]), 1);
    let s = '<div class="lscale" title="log scale; bars: searches per bucket">';
    for (const [l, u, c] of h.buckets) {
      const a = x(l), b = x(u);
      s += '<span class="hb" data-css="left:' + a.toFixed(2) + '%;width:' + Math.max(0.6, b - a).toFixed(2) + '%;height:' + (15 + 85 * c / peak).toFixed(0) + '%"></span>';
    }
    for (const [k, v] of [['p50', h.p50_us], ['p90', h.p90_us], ['p99', h.p99_us]])
      s += '<span class="mk ' + k + '" data-css="left:' + x(v).toFixed(2) + '%" title="' + k + ' ' + fmtUs(v) + '"></span>';
    return s + '</div>';
  };
  const row = (label, h, sub) => '<tr><td>' + label + (sub ? ' <span class="muted small">' + sub + '</span>' : '') + '</td><td class="num">' + fmtNum(h.count) +
    '</td><td class="num key50">' + fmtUs(h.p50_us) + '</td><td class="num key90">' + fmtUs(h.p90_us) + '</td><td class="num key99">' +
    fmtUs(h.p99_us) + '</td><td class="num">' + fmtUs(h.max_us) + '</td><td class="scale">' + scale(h) + '</td></tr>';
  let out = '';
  for (const n of live) {
    const ix = f.indices[n];
    out += '<div class="lat-index" data-index="' + esc(n) + '"><h3>' + esc(n) + '</h3><table class="lat"><thead><tr><th></th><th class="num">searches</th>' +
      '<th class="num key50">p50</th><th class="num key90">p90</th><th class="num key99">p99</th><th class="num">max</th><th class="scale-head">' + ticks + '</th></tr></thead><tbody>' +
      row('<b>coordinator</b>', ix.coordinator, 'whole search');
    for (const node of Object.keys(ix.copies).sort())
      out += row('shard on ' + esc(node), ix.copies[node], ix.copies[node].local ? 'local, per shard' : 'round trip, per shard');
    out += '</tbody></table></div>';
  }
  setHtml(el, out);
}

// ---- console ----
function renderConsoleIndices(m) {
  const sel = $('console-index');
  const names = m.indices.map((i) => i.name);
  const have = Array.from(sel.options).map((o) => o.value);
  if (have.join('\n') === names.join('\n')) return;
  const keep = S.indexChoice || sel.value;
  sel.innerHTML = names.map((n) => '<option>' + esc(n) + '</option>').join('');
  if (names.includes(keep)) sel.value = keep;
}

async function runConsole(ev) {
  ev.preventDefault();
  const out = $('console-result'), btn = $('console-run');
  const index = $('console-index').value;
  let body = $('console-body').value.trim() || '{}';
  try { body = JSON.stringify(JSON.parse(body)); } catch (e) {
    setHtml(out, '<p class="err">The body is not JSON: ' + esc(e.message) + '</p>');
    return;
  }
  if (!index) { setHtml(out, '<p class="err">No index to search.</p>'); return; }
  const fan = $('console-fanout').value;
  btn.disabled = true;
  const t0 = performance.now();
  const rep = await call('POST', '/' + encodeURIComponent(index) + '/_search?timings=true' + (fan ? '&fanout=' + fan : ''), body);
  const ms = performance.now() - t0;
  btn.disabled = false;
  if (rep.status !== 200 || !rep.body) { setHtml(out, refusal(rep)); return; }
  const b = rep.body, total = b.hits && b.hits.total;
  const tv = total && typeof total === 'object' ? total.value : total;
  let h = '<div class="result-head"><span class="counter"><b id="console-total">' + esc(tv) + '</b>' +
    (total && total.relation === 'gte' ? 'or more hits' : 'hits') + '</span><span class="counter"><b>' + esc(b.took) +
    ' ms</b>took (server)</span><span class="counter"><b>' + ms.toFixed(1) + ' ms</b>in the browser</span><span class="counter"><b>' +
    esc(b._shards.successful + ' / ' + b._shards.total) + '</b>shards answered</span>' +
    (b.timed_out ? '<span class="counter err"><b>timed out</b></span>' : '') + '</div>';
  const tm = b._shoal && b._shoal.shards;
  if (tm && tm.length) {
    h += '<h3>Per shard</h3><table class="timings"><thead><tr><th>index</th><th class="num">shard</th><th>node</th><th>where</th><th class="num">took</th><th></th></tr></thead><tbody>';
    const mx = Math.max(1, ...tm.map((t) => t.took_us));
    for (const t of tm)
      h += '<tr><td>' + esc(t.index) + '</td><td class="num">' + t.shard + '</td><td>' + esc(t.node) + '</td><td>' +
        (t.local ? 'local' : 'remote') + (t.ok ? '' : ' <span class="err">failed</span>') + '</td><td class="num">' + fmtUs(t.took_us) +
        '</td><td data-css="width:40%"><div class="bar"><span data-css="width:' + pct(100 * t.took_us / mx).toFixed(1) + '%"></span></div></td></tr>';
    h += '</tbody></table>';
  }
  const hits = (b.hits && b.hits.hits) || [];
  h += '<h3>Hits</h3>' + (hits.length ? '<table class="hits"><thead><tr><th>_id</th><th class="num">_score</th><th>_source</th></tr></thead><tbody>' +
    hits.map((x) => '<tr><td class="mono">' + esc(x._id) + '</td><td class="num">' + (x._score == null ? '–' : Number(x._score).toFixed(3)) +
      '</td><td class="src">' + esc(JSON.stringify(x._source)) + '</td></tr>').join('') + '</tbody></table>' : '<p class="muted">none</p>');
  if (b.aggregations) h += '<h3>Aggregations</h3><pre>' + esc(JSON.stringify(b.aggregations, null, 2)) + '</pre>';
  setHtml(out, h);
}

// ---- the loop ----
async function poll() {
  const [health, shards, nodes, stats, fanout] = await Promise.all([
    get('/_cluster/health'), get('/_cat/shards?format=json'), get('/_cat/nodes?format=json'),
    get('/_shoal/stats/nodes'), get('/_shoal/stats/fanout'),
  ]);
  const rep = { health, shards, nodes, stats, fanout };
  const all = Object.values(rep);
  if (all.every((r) => r.status === 0)) {
    banner('This node does not answer; showing what it said last. Retrying every 2 s.', true);
    return;
  }
  if (all.some((r) => r.status === 401)) banner('Not signed in (or the credentials were refused): reload the page to sign in.', true);
  else banner('');
  const m = buildModel(rep);
  S.last = m;
  const parts = [[renderOverview, 'overview'], [renderGrid, 'grid'], [renderRecoveries, 'recovery-list'],
    [renderNodes, 'node-list'], [renderLatency, 'latency-list'], [renderConsoleIndices, null]];
  for (const [fn, id] of parts) {
    try {
      if (fn === renderConsoleIndices) fn(m);
      else if (fn === renderLatency) fn(rep);
      else fn(rep, m);
    } catch (e) {
      // a rendering bug shows where it happened instead of freezing the page
      if (id) $(id).insertAdjacentHTML('afterbegin', '<p class="err">could not render: ' + esc(e && e.message) + '</p>');
    }
  }
  $('refreshed').textContent = 'updated ' + new Date().toLocaleTimeString();
  document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
}

async function loop() {
  try { await poll(); } finally { setTimeout(loop, REFRESH_MS); }
}

document.addEventListener('DOMContentLoaded', () => {
  $('grid').addEventListener('click', (ev) => {
    const t = ev.target.closest('.tile');
    if (!t) return;
    S.selected = S.selected === t.dataset.key ? null : t.dataset.key;
    document.querySelectorAll('.tile.selected').forEach((x) => x.classList.remove('selected'));
    if (S.selected) t.classList.add('selected');
    if (S.last) renderDetail(S.last);
  });
  $('console-index').addEventListener('change', (ev) => { S.indexChoice = ev.target.value; });
  $('console-form').addEventListener('submit', runConsole);
  loop();
});
