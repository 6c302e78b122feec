//! tantivy peer for Shoal's W5 benchmark (tests/bench/w5.py): the same
//! command-line protocol and output as tests/bench/lucene/LuceneBench.java.
//!
//!   index  DOCS MAPPING OUT [--threads N] [--ram-mb M]
//!       NDJSON documents -> index in OUT, merged to one segment.  Fields follow
//!       the ES mapping: text -> indexed with freqs and positions, BM25 norms,
//!       analyzer "std" (SimpleTokenizer + LowerCaser, no stop words, no
//!       stemming, no length filter); keyword -> raw token (STRING) + str fast
//!       field; integer/long/date -> i64 INDEXED + FAST (date as epoch millis);
//!       plus _id (raw, stored) and _source (the line, stored as bytes, the doc
//!       store's default compression).  Prints one JSON line.
//!   query  INDEX QUERIES REPEAT
//!       Runs a gen_queries.py file one-threaded in process: an untimed
//!       validation pass (exact count of every query against its "expect"), a
//!       warm-up, then REPEAT timed rounds per class.  One JSON line per class:
//!       qps, p50/p99 in microseconds, counts.  Exit 3 when a count differs.
//!
//! Modes: top = TopDocs by BM25 (tantivy never counts totals there: the
//! equivalent of track_total_hits false), count = Query::count (a term's doc
//! freq when nothing is deleted, otherwise a walk of the matches), sort =
//! TopDocs ordered by the i64 fast field, agg = a terms aggregation over the
//! str fast field's ordinals with counts per ordinal reused across queries,
//! as LuceneBench's TermsAgg does over SortedSetDocValues.  tantivy has no
//! query or result cache.
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::ops::Bound;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::Value;
use tantivy::collector::{Collector, SegmentCollector, TopDocs};
use tantivy::columnar::{Column, StrColumn};
use tantivy::indexer::NoMergePolicy;
use tantivy::query::{BooleanQuery, Occur, PhraseQuery, Query, RangeQuery, RegexQuery, TermQuery};
use tantivy::schema::{
    Field, FieldType, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, FAST, INDEXED,
    STORED, STRING,
};
use tantivy::tokenizer::{LowerCaser, SimpleTokenizer, TextAnalyzer};
use tantivy::{DocId, Index, IndexWriter, Order, ReloadPolicy, Score, SegmentReader, Searcher, TantivyDocument, Term};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default()).filter(LowerCaser).build()
}

fn register(index: &Index) {
    index.tokenizers().register("std", analyzer());
}

// ------------------------------------------------------------------ mapping
fn flatten(prefix: &str, props: &serde_json::Map<String, Value>, out: &mut Vec<(String, String)>) {
    for (k, def) in props {
        let name = format!("{}{}", prefix, k);
        if let Some(p) = def.get("properties").and_then(|p| p.as_object()) {
            flatten(&format!("{}.", name), p, out);
        } else {
            let t = def.get("type").and_then(|t| t.as_str()).unwrap_or("object");
            out.push((name, t.to_string()));
        }
    }
}

fn read_mapping(path: &str) -> Res<Vec<(String, String)>> {
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    if let Some(x) = m.get("mappings") {
        m = x.clone();
    }
    let mut out = Vec::new();
    if let Some(p) = m.get("properties").and_then(|p| p.as_object()) {
        flatten("", p, &mut out);
    }
    Ok(out)
}

fn build_schema(types: &[(String, String)]) -> Schema {
    let mut b = Schema::builder();
    b.add_text_field("_id", STRING | STORED);
    b.add_bytes_field("_source", STORED);
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer("std")
            .set_index_option(IndexRecordOption::WithFreqsAndPositions)
            .set_fieldnorms(true),
    );
    for (name, t) in types {
        match t.as_str() {
            "text" => {
                b.add_text_field(name, text.clone());
            }
            "keyword" => {
                b.add_text_field(name, STRING | FAST);
            }
            "integer" | "short" | "byte" | "long" | "date" => {
                b.add_i64_field(name, INDEXED | FAST);
            }
            _ => {}
        }
    }
    b.build()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// "YYYY-MM-DD" or "YYYY-MM-DDTHH:MM:SS[.fff]Z" (what gen_w2.py writes) -> epoch millis.
fn date_millis(v: &Value) -> Option<i64> {
    if let Some(n) = v.as_i64() {
        return Some(n);
    }
    let s = v.as_str()?;
    let num = |a: usize, b: usize| s.get(a..b).and_then(|x| x.parse::<i64>().ok());
    let days = days_from_civil(num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let mut ms = days * 86_400_000;
    if s.len() >= 19 {
        ms += (num(11, 13)? * 3600 + num(14, 16)? * 60 + num(17, 19)?) * 1000;
        if s.as_bytes().get(19) == Some(&b'.') {
            let frac: String = s[20..].chars().take_while(|c| c.is_ascii_digit()).collect();
            let f3 = format!("{:0<3}", &frac[..frac.len().min(3)]);
            ms += f3.parse::<i64>().unwrap_or(0);
        }
        if !s.ends_with('Z') {
            return None; // offsets do not occur in the benchmark corpora
        }
    }
    Some(ms)
}

struct Fields {
    by_name: HashMap<String, (Field, String)>,
    id: Field,
    source: Field,
}

fn add_value(doc: &mut TantivyDocument, f: Field, t: &str, v: &Value) {
    match v {
        Value::Null => {}
        Value::Array(xs) => xs.iter().for_each(|x| add_value(doc, f, t, x)),
        _ => match t {
            "text" | "keyword" => {
                let s = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                doc.add_text(f, s);
            }
            "date" => {
                if let Some(ms) = date_millis(v) {
                    doc.add_i64(f, ms);
                }
            }
            _ => {
                if let Some(x) = v.as_i64().or_else(|| v.as_f64().map(|x| x as i64)) {
                    doc.add_i64(f, x);
                }
            }
        },
    }
}

fn add_object(doc: &mut TantivyDocument, prefix: &str, o: &serde_json::Map<String, Value>, fs: &Fields) {
    for (k, v) in o {
        let name = format!("{}{}", prefix, k);
        if let Value::Object(m) = v {
            add_object(doc, &format!("{}.", name), m, fs);
            continue;
        }
        // unmapped fields are not indexed (the corpora's mappings are strict)
        if let Some((f, t)) = fs.by_name.get(&name) {
            add_value(doc, *f, t, v);
        }
    }
}

fn to_doc(line: &str, fs: &Fields) -> Res<TantivyDocument> {
    let v: Value = serde_json::from_str(line)?;
    let o = v.as_object().ok_or("document is not an object")?;
    let mut doc = TantivyDocument::default();
    let id = match o.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(x) => x.to_string(),
        None => String::new(),
    };
    doc.add_text(fs.id, id);
    doc.add_bytes(fs.source, line.as_bytes());
    add_object(&mut doc, "", o, fs);
    Ok(doc)
}

fn dir_bytes(p: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let m = match e.metadata() {
                Ok(m) => m,
                Err(_) => continue,
            };
            n += if m.is_dir() { dir_bytes(&e.path()) } else { m.len() };
        }
    }
    n
}

fn cpu_seconds() -> f64 {
    // utime + stime of the whole process, all threads
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = s.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = 100.0; // sysconf(_SC_CLK_TCK) is 100 on Linux
    if f.len() > 12 {
        (f[11].parse::<f64>().unwrap_or(0.0) + f[12].parse::<f64>().unwrap_or(0.0)) / tick
    } else {
        0.0
    }
}

// ------------------------------------------------------------------ index
fn index(a: &[String]) -> Res<()> {
    let (docs, mapping, out) = (&a[1], &a[2], &a[3]);
    let mut threads = 1usize;
    let mut ram_mb = 256f64;
    let mut k = 4;
    while k + 1 < a.len() {
        match a[k].as_str() {
            "--threads" => threads = a[k + 1].parse()?,
            "--ram-mb" => ram_mb = a[k + 1].parse()?,
            o => return Err(format!("unknown option {}", o).into()),
        }
        k += 2;
    }
    let types = read_mapping(mapping)?;
    let schema = build_schema(&types);
    let mut by_name = HashMap::new();
    for (name, t) in &types {
        if let Ok(f) = schema.get_field(name) {
            by_name.insert(name.clone(), (f, t.clone()));
        }
    }
    let fs = Fields { by_name, id: schema.get_field("_id")?, source: schema.get_field("_source")? };
    let outp = Path::new(out);
    if outp.exists() {
        std::fs::remove_dir_all(outp)?;
    }
    std::fs::create_dir_all(outp)?;
    let index = Index::create_in_dir(outp, schema)?;
    register(&index);
    let c0 = cpu_seconds();
    let t0 = Instant::now();
    // tantivy wants at least 15 MB per indexing thread
    let budget = ((ram_mb * 1048576.0) as usize).max(threads * 16 << 20);
    let mut w: IndexWriter = index.writer_with_num_threads(threads, budget)?;
    w.set_merge_policy(Box::new(NoMergePolicy));
    let mut n = 0u64;
    let r = BufReader::with_capacity(1 << 20, std::fs::File::open(docs)?);
    for line in r.lines() {
        let line = line?;
        if line.is_empty() {
            continue;
        }
        w.add_document(to_doc(&line, &fs)?)?;
        n += 1;
    }
    w.commit()?;
    let t1 = t0.elapsed().as_secs_f64();
    let c1 = cpu_seconds();
    let ids = index.searchable_segment_ids()?;
    let segs_before = ids.len();
    if ids.len() > 1 {
        w.merge(&ids).wait()?;
    }
    w.garbage_collect_files().wait()?;
    w.wait_merging_threads()?;
    let t2 = t0.elapsed().as_secs_f64();
    let c2 = cpu_seconds();
    let segs_after = index.searchable_segment_ids()?.len();
    let bytes = dir_bytes(outp);
    let (ts, tm) = (t1, t2 - t1);
    println!(
        "{{\"engine\":\"tantivy\",\"version\":\"{}\",\"docs\":{},\"threads\":{},\"ram_mb\":{:.0},\
         \"searchable_s\":{:.3},\"force_merge_s\":{:.3},\"total_s\":{:.3},\"cpu_s\":{:.3},\
         \"cpu_searchable_s\":{:.3},\"cpu_merge_s\":{:.3},\"docs_per_s\":{:.0},\"docs_per_cpu_s\":{:.0},\
         \"merge_busy_threads\":{:.2},\"segments_before_merge\":{},\"segments\":{},\"index_bytes\":{}}}",
        tantivy::version(),
        n,
        threads,
        ram_mb,
        ts,
        tm,
        ts + tm,
        c2 - c0,
        c1 - c0,
        c2 - c1,
        n as f64 / ts,
        n as f64 / (c2 - c0).max(1e-9),
        if tm > 0.0 { (c2 - c1) / tm } else { 0.0 },
        segs_before,
        segs_after,
        bytes
    );
    Ok(())
}

// ------------------------------------------------------------------ queries
fn regex_escape(s: &str) -> String {
    let mut o = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            o.push('\\');
        }
        o.push(c);
    }
    o
}

fn glob_to_regex(p: &str) -> String {
    let mut o = String::new();
    for c in p.chars() {
        match c {
            '*' => o.push_str(".*"),
            '?' => o.push('.'),
            c => o.push_str(&regex_escape(&c.to_string())),
        }
    }
    o
}

fn field(schema: &Schema, name: &str) -> Res<(Field, bool)> {
    let f = schema.get_field(name)?;
    let is_text = match schema.get_field_entry(f).field_type() {
        FieldType::Str(o) => o
            .get_indexing_options()
            .map(|i| i.index_option() != IndexRecordOption::Basic)
            .unwrap_or(false),
        _ => false,
    };
    Ok((f, is_text))
}

fn s<'a>(v: &'a Value, k: &str) -> Res<&'a str> {
    v.get(k).and_then(|x| x.as_str()).ok_or_else(|| format!("missing \"{}\"", k).into())
}

fn build(schema: &Schema, q: &Value) -> Res<Box<dyn Query>> {
    let t = s(q, "t")?;
    Ok(match t {
        "term" => {
            let (f, is_text) = field(schema, s(q, "f")?)?;
            let opt = if is_text { IndexRecordOption::WithFreqs } else { IndexRecordOption::Basic };
            Box::new(TermQuery::new(Term::from_field_text(f, s(q, "v")?), opt))
        }
        "and" | "or" | "filter" => {
            let occ = if t == "or" { Occur::Should } else { Occur::Must };
            let mut cl: Vec<(Occur, Box<dyn Query>)> = Vec::new();
            for c in q["c"].as_array().ok_or("c")? {
                cl.push((occ, build(schema, c)?));
            }
            Box::new(BooleanQuery::new(cl))
        }
        "phrase" => {
            let (f, _) = field(schema, s(q, "f")?)?;
            let terms: Vec<Term> = q["v"]
                .as_array()
                .ok_or("v")?
                .iter()
                .map(|x| Term::from_field_text(f, x.as_str().unwrap_or("")))
                .collect();
            let mut pq = PhraseQuery::new(terms);
            pq.set_slop(q.get("slop").and_then(|x| x.as_u64()).unwrap_or(0) as u32);
            Box::new(pq)
        }
        "prefix" => {
            let (f, _) = field(schema, s(q, "f")?)?;
            Box::new(RegexQuery::from_pattern(&format!("{}.*", regex_escape(s(q, "v")?)), f)?)
        }
        "wildcard" => {
            let (f, _) = field(schema, s(q, "f")?)?;
            Box::new(RegexQuery::from_pattern(&glob_to_regex(s(q, "v")?), f)?)
        }
        "regexp" => {
            // the generated patterns use [a-z], ., *, {n} and literals: the
            // same in Lucene's RegExp and tantivy's (anchored) FST regex
            let (f, _) = field(schema, s(q, "f")?)?;
            Box::new(RegexQuery::from_pattern(s(q, "v")?, f)?)
        }
        "range_int" | "range_long" => {
            let (f, _) = field(schema, s(q, "f")?)?;
            let lo = q["lo"].as_i64().ok_or("lo")?;
            let hi = q["hi"].as_i64().ok_or("hi")?;
            Box::new(RangeQuery::new(
                Bound::Included(Term::from_field_i64(f, lo)),
                Bound::Included(Term::from_field_i64(f, hi)),
            ))
        }
        other => return Err(format!("unknown query type {}", other).into()),
    })
}

/// Terms aggregation (size k) over a keyword field's str fast field: counts
/// per ordinal in a buffer kept across queries (only the touched slots are
/// reset), top k by count desc then term asc; several segments merge by term.
struct TermsAgg {
    field: String,
    size: usize,
    multi: bool,
    buf: Mutex<Vec<(Vec<u32>, Vec<u32>)>>,
}

struct TermsAggSeg {
    ords: Option<Column<u64>>,
    col: Option<StrColumn>,
    counts: Vec<u32>,
    touched: Vec<u32>,
    hits: u64,
    size: usize,
    multi: bool,
}

struct AggFruit {
    hits: u64,
    top: Vec<(String, u64)>,
    bufs: (Vec<u32>, Vec<u32>),
}

impl SegmentCollector for TermsAggSeg {
    type Fruit = AggFruit;
    fn collect(&mut self, doc: DocId, _score: Score) {
        self.hits += 1;
        if let Some(ords) = &self.ords {
            for o in ords.values_for_doc(doc) {
                let c = &mut self.counts[o as usize];
                if *c == 0 {
                    self.touched.push(o as u32);
                }
                *c += 1;
            }
        }
    }
    fn harvest(mut self) -> AggFruit {
        let mut top: Vec<(String, u64)> = Vec::new();
        if let Some(col) = &self.col {
            let mut sel: Vec<(u32, u32)> = self.touched.iter().map(|&o| (o, self.counts[o as usize])).collect();
            if !self.multi && sel.len() > self.size {
                sel.select_nth_unstable_by(self.size, |x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
                sel.truncate(self.size);
            }
            sel.sort_unstable_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
            let mut sb = String::new();
            for (o, c) in sel {
                sb.clear();
                let _ = col.ord_to_str(o as u64, &mut sb);
                top.push((sb.clone(), c as u64));
            }
        }
        for &o in &self.touched {
            self.counts[o as usize] = 0;
        }
        self.touched.clear();
        AggFruit { hits: self.hits, top, bufs: (self.counts, self.touched) }
    }
}

impl Collector for TermsAgg {
    type Fruit = (u64, Vec<(String, u64)>);
    type Child = TermsAggSeg;
    fn for_segment(&self, _ord: u32, r: &SegmentReader) -> tantivy::Result<TermsAggSeg> {
        let col = r.fast_fields().str(&self.field)?;
        let (mut counts, touched) = self.buf.lock().unwrap().pop().unwrap_or_default();
        let ords = col.as_ref().map(|c| c.ords().clone());
        let nt = col.as_ref().map(|c| c.num_terms()).unwrap_or(0);
        if counts.len() < nt {
            counts.resize(nt, 0);
        }
        Ok(TermsAggSeg { ords, col, counts, touched, hits: 0, size: self.size, multi: self.multi })
    }
    fn requires_scoring(&self) -> bool {
        false
    }
    fn merge_fruits(&self, fruits: Vec<AggFruit>) -> tantivy::Result<Self::Fruit> {
        let mut hits = 0;
        let mut all: HashMap<String, u64> = HashMap::new();
        let single = fruits.len() == 1;
        let mut tops = Vec::new();
        for f in fruits {
            hits += f.hits;
            self.buf.lock().unwrap().push(f.bufs);
            if single {
                tops = f.top;
            } else {
                for (k, c) in f.top {
                    *all.entry(k).or_insert(0) += c;
                }
            }
        }
        if !single {
            tops = all.into_iter().collect();
            tops.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
            tops.truncate(self.size);
        }
        Ok((hits, tops))
    }
}

struct Q {
    cls: String,
    mode: String,
    field: String,
    k: usize,
    query: Box<dyn Query>,
    expect: u64,
    count: u64,
}

fn run_one(s: &Searcher, q: &Q, agg: &mut HashMap<String, TermsAgg>) -> Res<u64> {
    Ok(match q.mode.as_str() {
        "count" => q.query.count(s)? as u64,
        "top" => s.search(&*q.query, &TopDocs::with_limit(q.k).order_by_score())?.len() as u64,
        "sort" => s
            .search(&*q.query, &TopDocs::with_limit(q.k).order_by_fast_field::<i64>(&q.field, Order::Asc))?
            .len() as u64,
        "agg" => {
            let multi = s.segment_readers().len() > 1;
            let a = agg.entry(q.field.clone()).or_insert_with(|| TermsAgg {
                field: q.field.clone(),
                size: q.k,
                multi,
                buf: Mutex::new(Vec::new()),
            });
            a.size = q.k;
            let (_hits, top) = s.search(&*q.query, &*a)?;
            top.len() as u64
        }
        m => return Err(format!("unknown mode {}", m).into()),
    })
}

fn agg_hits(s: &Searcher, q: &Q, agg: &mut HashMap<String, TermsAgg>) -> Res<u64> {
    let multi = s.segment_readers().len() > 1;
    let a = agg.entry(q.field.clone()).or_insert_with(|| TermsAgg {
        field: q.field.clone(),
        size: q.k,
        multi,
        buf: Mutex::new(Vec::new()),
    });
    Ok(s.search(&*q.query, &*a)?.0)
}

fn query(a: &[String]) -> Res<()> {
    let (path, qfile) = (&a[1], &a[2]);
    let repeat: usize = a[3].parse()?;
    let index = Index::open_in_dir(path)?;
    register(&index);
    let schema = index.schema();
    let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
    let searcher = reader.searcher();
    let mut qs: Vec<Q> = Vec::new();
    for line in BufReader::new(std::fs::File::open(qfile)?).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let o: Value = serde_json::from_str(&line)?;
        let l = &o["lucene"];
        qs.push(Q {
            cls: s(&o, "class")?.to_string(),
            mode: s(l, "mode")?.to_string(),
            field: l.get("field").and_then(|x| x.as_str()).unwrap_or("").to_string(),
            k: l.get("k").and_then(|x| x.as_u64()).unwrap_or(10) as usize,
            query: build(&schema, &l["q"])?,
            expect: o["expect"].as_u64().ok_or("expect")?,
            count: 0,
        });
    }
    let mut agg: HashMap<String, TermsAgg> = HashMap::new();
    // untimed validation pass: exact counts
    let mut bad = 0;
    for i in 0..qs.len() {
        let c = if qs[i].mode == "agg" {
            agg_hits(&searcher, &qs[i], &mut agg)?
        } else {
            qs[i].query.count(&searcher)? as u64
        };
        qs[i].count = c;
        if c != qs[i].expect {
            bad += 1;
        }
    }
    let mut classes: Vec<String> = Vec::new();
    let mut by_class: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, q) in qs.iter().enumerate() {
        if !by_class.contains_key(&q.cls) {
            classes.push(q.cls.clone());
        }
        by_class.entry(q.cls.clone()).or_default().push(i);
    }
    // warm-up (no JIT here: the page cache and CPU caches), untimed: 2 rounds
    let mut sink = 0u64;
    for _ in 0..2 {
        for q in &qs {
            sink += run_one(&searcher, q, &mut agg)?;
        }
    }
    for c in &classes {
        let cq = &by_class[c];
        let mut lat: Vec<u128> = Vec::with_capacity(repeat * cq.len());
        let b0 = Instant::now();
        for _ in 0..repeat {
            for &i in cq {
                let q0 = Instant::now();
                sink += run_one(&searcher, &qs[i], &mut agg)?;
                lat.push(q0.elapsed().as_nanos());
            }
        }
        let el = b0.elapsed().as_secs_f64();
        lat.sort_unstable();
        let m = lat.len();
        let counts: Vec<String> = cq.iter().map(|&i| qs[i].count.to_string()).collect();
        let mism = cq.iter().filter(|&&i| qs[i].count != qs[i].expect).count();
        println!(
            "{{\"engine\":\"tantivy\",\"class\":\"{}\",\"queries\":{},\"runs\":{},\"qps\":{:.1},\"p50_us\":{:.1},\
             \"p99_us\":{:.1},\"counts\":[{}],\"mismatches\":{}}}",
            c,
            cq.len(),
            m,
            m as f64 / el,
            lat[((m - 1) as f64 * 0.5) as usize] as f64 / 1e3,
            lat[((m - 1) as f64 * 0.99) as usize] as f64 / 1e3,
            counts.join(","),
            mism
        );
    }
    eprintln!(
        "tantivy {}: {} queries, {} count mismatches, docs={} segments={} (sink {})",
        tantivy::version(),
        qs.len(),
        bad,
        searcher.num_docs(),
        searcher.segment_readers().len(),
        sink
    );
    if bad > 0 {
        std::process::exit(3);
    }
    Ok(())
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let r = match a.first().map(|s| s.as_str()) {
        Some("index") if a.len() >= 4 => index(&a),
        Some("query") if a.len() >= 4 => query(&a),
        _ => {
            eprintln!(
                "usage: tantivy-bench index DOCS MAPPING OUT [--threads N] [--ram-mb M]\n       \
                 tantivy-bench query INDEX QUERIES REPEAT"
            );
            std::process::exit(2);
        }
    };
    if let Err(e) = r {
        eprintln!("tantivy-bench: {}", e);
        std::process::exit(1);
    }
}
