// Apache Lucene 10 peer for Shoal's W5 benchmark (Maven Central; the engine
// inside Elasticsearch 9 and OpenSearch 3).  Same command-line protocol and
// output as tests/bench/lucene/LuceneBench.java (Lucene 8.8), ported to the
// Lucene 10 API and configured as Elasticsearch configures Lucene where it
// matters here: BM25 (k1 1.2, b 0.75), query cache off, one segment,
// BEST_SPEED stored fields, exact counts through IndexSearcher.count (which
// answers a term or match-all count from the index statistics and otherwise
// counts through the scorer's bulk path).  Build with Maven (pom.xml next to
// src/); w5.py builds it on first use.
//
//   index  DOCS MAPPING OUT [--threads N] [--ram-mb M]
//       NDJSON documents -> index in OUT, force-merged to one segment.
//       Fields follow the ES mapping: text -> TextField (StandardAnalyzer, no
//       stop words, no stemming); keyword -> StringField + SortedSetDocValues;
//       integer/long -> IntPoint/LongPoint + NumericDocValues; date ->
//       LongPoint + NumericDocValues (epoch millis); plus _id (indexed,
//       stored) and _source (the line, stored; Lucene's default BEST_SPEED
//       stored-fields compression, as in Elasticsearch).  Prints one JSON line.
//   query  INDEX QUERIES REPEAT
//       Runs a gen_queries.py file one-threaded in process: an untimed
//       validation pass (exact count of every query against its "expect"),
//       a JIT warm-up, then REPEAT timed rounds per class.  One JSON line per
//       class: qps, p50/p99 in microseconds, counts.
//   scores DOCS QUERIES [MAPPING]
//       In-memory index of DOCS; for every "top" query, the BM25 top-10
//       (id, score) as JSON lines, for cross-checking Shoal's scoring.
import java.io.*;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.time.*;
import java.time.format.DateTimeFormatter;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.lucene.analysis.CharArraySet;
import org.apache.lucene.analysis.standard.StandardAnalyzer;
import org.apache.lucene.document.*;
import org.apache.lucene.index.*;
import org.apache.lucene.search.*;
import org.apache.lucene.store.*;
import org.apache.lucene.util.Bits;
import org.apache.lucene.util.BytesRef;

public class Lucene10Bench {
  // ---------------------------------------------------------------- JSON
  // A small recursive-descent parser: objects -> LinkedHashMap, arrays ->
  // ArrayList, numbers -> Long or Double, plus String/Boolean/null.
  static final class Json {
    final String s; int i;
    Json(String s) { this.s = s; }
    static Object parse(String s) {
      Json j = new Json(s); j.ws(); Object v = j.value(); j.ws();
      if (j.i != s.length()) throw new IllegalArgumentException("trailing data at " + j.i);
      return v;
    }
    void ws() { while (i < s.length() && s.charAt(i) <= ' ') i++; }
    Object value() {
      char c = s.charAt(i);
      switch (c) {
        case '{': {
          i++; Map<String, Object> m = new LinkedHashMap<>(); ws();
          if (s.charAt(i) == '}') { i++; return m; }
          while (true) {
            ws(); String k = str(); ws(); expect(':'); ws(); m.put(k, value()); ws();
            if (s.charAt(i) == ',') { i++; continue; }
            expect('}'); return m;
          }
        }
        case '[': {
          i++; List<Object> l = new ArrayList<>(); ws();
          if (s.charAt(i) == ']') { i++; return l; }
          while (true) {
            ws(); l.add(value()); ws();
            if (s.charAt(i) == ',') { i++; continue; }
            expect(']'); return l;
          }
        }
        case '"': return str();
        case 't': i += 4; return Boolean.TRUE;
        case 'f': i += 5; return Boolean.FALSE;
        case 'n': i += 4; return null;
        default: {
          int st = i; boolean dbl = false;
          while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) {
            if (".eE".indexOf(s.charAt(i)) >= 0) dbl = true;
            i++;
          }
          String num = s.substring(st, i);
          if (num.isEmpty()) throw new IllegalArgumentException("bad JSON at " + st);
          return dbl ? (Object) Double.parseDouble(num) : (Object) Long.parseLong(num);
        }
      }
    }
    void expect(char c) {
      if (s.charAt(i) != c) throw new IllegalArgumentException("expected " + c + " at " + i);
      i++;
    }
    String str() {
      expect('"');
      StringBuilder b = null; int st = i;
      while (true) {
        char c = s.charAt(i);
        if (c == '"') { String r = b == null ? s.substring(st, i) : b.append(s, st, i).toString(); i++; return r; }
        if (c == '\\') {
          if (b == null) b = new StringBuilder();
          b.append(s, st, i);
          char e = s.charAt(i + 1);
          switch (e) {
            case 'n': b.append('\n'); break; case 't': b.append('\t'); break;
            case 'r': b.append('\r'); break; case 'b': b.append('\b'); break;
            case 'f': b.append('\f'); break;
            case 'u': b.append((char) Integer.parseInt(s.substring(i + 2, i + 6), 16)); i += 4; break;
            default: b.append(e);
          }
          i += 2; st = i; continue;
        }
        i++;
      }
    }
  }

  @SuppressWarnings("unchecked")
  static Map<String, Object> obj(Object o) { return (Map<String, Object>) o; }
  @SuppressWarnings("unchecked")
  static List<Object> arr(Object o) { return (List<Object>) o; }

  static double cpuSeconds() {
    return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
        .getProcessCpuTime() / 1e9;
  }

  static StandardAnalyzer analyzer() { return new StandardAnalyzer(CharArraySet.EMPTY_SET); }

  // ---------------------------------------------------------------- documents
  static Map<String, String> readMapping(String path) throws IOException {
    Map<String, String> types = new LinkedHashMap<>();
    if (path == null) return types;
    Map<String, Object> m = obj(Json.parse(new String(Files.readAllBytes(Paths.get(path)), StandardCharsets.UTF_8)));
    if (m.containsKey("mappings")) m = obj(m.get("mappings"));
    flatten("", obj(m.get("properties")), types);
    return types;
  }

  static void flatten(String prefix, Map<String, Object> props, Map<String, String> out) {
    for (Map.Entry<String, Object> e : props.entrySet()) {
      Map<String, Object> def = obj(e.getValue());
      String name = prefix + e.getKey();
      if (def.containsKey("properties")) flatten(name + ".", obj(def.get("properties")), out);
      else out.put(name, String.valueOf(def.getOrDefault("type", "object")));
    }
  }

  static long dateMillis(Object v) {
    if (v instanceof Long) return (Long) v;
    String s = (String) v;
    if (s.length() == 10) return LocalDate.parse(s).atStartOfDay(ZoneOffset.UTC).toInstant().toEpochMilli();
    return OffsetDateTime.parse(s, DateTimeFormatter.ISO_OFFSET_DATE_TIME).toInstant().toEpochMilli();
  }

  static void addValue(Document doc, String name, String type, Object v) {
    if (v == null) return;
    if (v instanceof List) { for (Object x : arr(v)) addValue(doc, name, type, x); return; }
    switch (type) {
      case "text":
        doc.add(new TextField(name, v.toString(), Field.Store.NO)); break;
      case "keyword":
        doc.add(new StringField(name, v.toString(), Field.Store.NO));
        doc.add(new SortedSetDocValuesField(name, new BytesRef(v.toString()))); break;
      case "integer": case "short": case "byte": {
        int x = ((Number) v).intValue();
        doc.add(new IntPoint(name, x)); doc.add(new SortedNumericDocValuesField(name, x)); break;
      }
      case "long": {
        long x = ((Number) v).longValue();
        doc.add(new LongPoint(name, x)); doc.add(new SortedNumericDocValuesField(name, x)); break;
      }
      case "date": {
        long x = dateMillis(v);
        doc.add(new LongPoint(name, x)); doc.add(new SortedNumericDocValuesField(name, x)); break;
      }
      default: break; // other types do not occur in the benchmark corpora
    }
  }

  static void addObject(Document doc, String prefix, Map<String, Object> o, Map<String, String> types) {
    for (Map.Entry<String, Object> e : o.entrySet()) {
      String name = prefix + e.getKey();
      Object v = e.getValue();
      if (v instanceof Map) { addObject(doc, name + ".", obj(v), types); continue; }
      String type = types.get(name);
      if (type == null) type = v instanceof String ? "text" : "none";
      addValue(doc, name, type, v);
    }
  }

  static Document toDoc(String line, Map<String, String> types) {
    Map<String, Object> src = obj(Json.parse(line));
    Document doc = new Document();
    Object id = src.get("id");
    doc.add(new StringField("_id", String.valueOf(id), Field.Store.YES));
    doc.add(new StoredField("_source", new BytesRef(line)));
    addObject(doc, "", src, types);
    return doc;
  }

  static long dirBytes(Path p) throws IOException {
    long[] n = {0};
    Files.walk(p).filter(Files::isRegularFile).forEach(f -> n[0] += f.toFile().length());
    return n[0];
  }

  // ---------------------------------------------------------------- index
  static void index(String[] a) throws Exception {
    String docs = a[1], mapping = a[2], out = a[3];
    int threads = 1; double ramMb = 256;
    for (int k = 4; k + 1 < a.length; k += 2) {
      if (a[k].equals("--threads")) threads = Integer.parseInt(a[k + 1]);
      else if (a[k].equals("--ram-mb")) ramMb = Double.parseDouble(a[k + 1]);
      else throw new IllegalArgumentException("unknown option " + a[k]);
    }
    Map<String, String> types = readMapping(mapping);
    Path outp = Paths.get(out);
    Directory dir = FSDirectory.open(outp);
    IndexWriterConfig cfg = new IndexWriterConfig(analyzer())
        .setOpenMode(IndexWriterConfig.OpenMode.CREATE).setRAMBufferSizeMB(ramMb);
    double c0 = cpuSeconds(); long t0 = System.nanoTime();
    IndexWriter w = new IndexWriter(dir, cfg);
    BlockingQueue<List<String>> q = new ArrayBlockingQueue<>(64);
    List<String> poison = new ArrayList<>();
    AtomicLong n = new AtomicLong();
    AtomicReference<Throwable> fail = new AtomicReference<>();
    Thread[] ws = new Thread[threads];
    for (int k = 0; k < threads; k++) {
      ws[k] = new Thread(() -> {
        try {
          while (true) {
            List<String> batch = q.take();
            if (batch == poison) return;
            for (String line : batch) { w.addDocument(toDoc(line, types)); }
            n.addAndGet(batch.size());
          }
        } catch (Throwable e) { fail.compareAndSet(null, e); }
      });
      ws[k].start();
    }
    try (BufferedReader r = Files.newBufferedReader(Paths.get(docs), StandardCharsets.UTF_8)) {
      List<String> batch = new ArrayList<>(256);
      String line;
      while ((line = r.readLine()) != null) {
        if (line.isEmpty()) continue;
        batch.add(line);
        if (batch.size() == 256) { q.put(batch); batch = new ArrayList<>(256); }
        if (fail.get() != null) break;
      }
      if (!batch.isEmpty()) q.put(batch);
    }
    for (int k = 0; k < threads; k++) q.put(poison);
    for (Thread t : ws) t.join();
    if (fail.get() != null) throw new RuntimeException(fail.get());
    w.commit();
    long t1 = System.nanoTime(); double c1 = cpuSeconds();
    int segsBefore;
    try (DirectoryReader rd = DirectoryReader.open(dir)) { segsBefore = rd.leaves().size(); }
    w.forceMerge(1);
    w.commit();
    w.close();
    long t2 = System.nanoTime(); double c2 = cpuSeconds();
    int segsAfter;
    try (DirectoryReader rd = DirectoryReader.open(dir)) { segsAfter = rd.leaves().size(); }
    long bytes = dirBytes(outp);
    double ts = (t1 - t0) / 1e9, tm = (t2 - t1) / 1e9;
    System.out.printf(Locale.ROOT,
        "{\"engine\":\"lucene10\",\"version\":\"%s\",\"docs\":%d,\"threads\":%d,\"ram_mb\":%.0f," +
        "\"searchable_s\":%.3f,\"force_merge_s\":%.3f,\"total_s\":%.3f,\"cpu_s\":%.3f," +
        "\"cpu_searchable_s\":%.3f,\"cpu_merge_s\":%.3f,\"docs_per_s\":%.0f,\"docs_per_cpu_s\":%.0f," +
        "\"merge_busy_threads\":%.2f,\"segments_before_merge\":%d,\"segments\":%d,\"index_bytes\":%d}%n",
        org.apache.lucene.util.Version.LATEST, n.get(), threads, ramMb, ts, tm, ts + tm, c2 - c0,
        c1 - c0, c2 - c1, n.get() / ts, n.get() / (c2 - c0), tm > 0 ? (c2 - c1) / tm : 0.0,
        segsBefore, segsAfter, bytes);
  }

  // ---------------------------------------------------------------- queries
  static Query build(Map<String, Object> s) {
    String t = (String) s.get("t");
    switch (t) {
      case "term": return new TermQuery(new Term((String) s.get("f"), (String) s.get("v")));
      case "and": case "or": case "filter": {
        BooleanQuery.Builder b = new BooleanQuery.Builder();
        BooleanClause.Occur occ = t.equals("and") ? BooleanClause.Occur.MUST
            : t.equals("or") ? BooleanClause.Occur.SHOULD : BooleanClause.Occur.FILTER;
        for (Object c : arr(s.get("c"))) b.add(build(obj(c)), occ);
        return b.build();
      }
      case "phrase": {
        List<Object> v = arr(s.get("v"));
        String[] terms = v.stream().map(Object::toString).toArray(String[]::new);
        return new PhraseQuery(((Number) s.getOrDefault("slop", 0L)).intValue(), (String) s.get("f"), terms);
      }
      case "prefix": return new PrefixQuery(new Term((String) s.get("f"), (String) s.get("v")));
      case "wildcard": return new WildcardQuery(new Term((String) s.get("f"), (String) s.get("v")));
      case "regexp": return new RegexpQuery(new Term((String) s.get("f"), (String) s.get("v")));
      case "range_int":
        return IntPoint.newRangeQuery((String) s.get("f"), ((Number) s.get("lo")).intValue(),
                                      ((Number) s.get("hi")).intValue());
      case "range_long":
        return LongPoint.newRangeQuery((String) s.get("f"), ((Number) s.get("lo")).longValue(),
                                       ((Number) s.get("hi")).longValue());
      default: throw new IllegalArgumentException("unknown query type " + t);
    }
  }

  static final class Q {
    String cls, mode, field; int k; Query query; long expect; long count;
  }

  /** Terms aggregation over SortedSetDocValues with counts kept per field and
   *  reused across queries (what ES does with global ordinals on one segment;
   *  several segments fall back to merging by term bytes). */
  static final class TermsAgg {
    final Map<String, int[]> counts = new HashMap<>();
    int[] touched = new int[1 << 16];

    long run(IndexSearcher s, Query q, String field, int size, List<String> topOut) throws IOException {
      List<LeafReaderContext> leaves = s.getIndexReader().leaves();
      Map<String, Long> multi = leaves.size() > 1 ? new HashMap<>() : null;
      long[] hits = {0};
      Weight w = s.createWeight(s.rewrite(q), ScoreMode.COMPLETE_NO_SCORES, 1f);
      for (LeafReaderContext ctx : leaves) {
        SortedSetDocValues dv = DocValues.getSortedSet(ctx.reader(), field);
        int vc = (int) Math.min(Integer.MAX_VALUE, dv.getValueCount());
        String key = field + "#" + ctx.ord;
        int[] c = counts.get(key);
        if (c == null || c.length < vc) { c = new int[Math.max(1, vc)]; counts.put(key, c); }
        final int[] cnt = c;
        int[] nt = {0};
        Scorer sc = w.scorer(ctx);
        if (sc != null) {
          DocIdSetIterator it = sc.iterator();
          Bits live = ctx.reader().getLiveDocs();
          for (int d = it.nextDoc(); d != DocIdSetIterator.NO_MORE_DOCS; d = it.nextDoc()) {
            if (live != null && !live.get(d)) continue;
            hits[0]++;
            if (dv.advanceExact(d)) {
              for (int vi = 0, vn = dv.docValueCount(); vi < vn; vi++) {
                long o = dv.nextOrd();
                if (cnt[(int) o]++ == 0) {
                  if (nt[0] == touched.length) touched = Arrays.copyOf(touched, touched.length * 2);
                  touched[nt[0]++] = (int) o;
                }
              }
            }
          }
        }
        // top `size` by count desc, then term asc (ordinal order = term order)
        int m = nt[0];
        PriorityQueue<int[]> pq = new PriorityQueue<>((x, y) -> x[1] != y[1] ? Integer.compare(x[1], y[1]) : Integer.compare(y[0], x[0]));
        for (int i = 0; i < m; i++) {
          int o = touched[i];
          if (multi != null) multi.merge(dv.lookupOrd(o).utf8ToString(), (long) cnt[o], Long::sum);
          else {
            pq.add(new int[] {o, cnt[o]});
            if (pq.size() > size) pq.poll();
          }
          cnt[o] = 0;
        }
        if (multi == null && topOut != null) {
          List<int[]> l = new ArrayList<>(pq);
          l.sort((x, y) -> x[1] != y[1] ? Integer.compare(y[1], x[1]) : Integer.compare(x[0], y[0]));
          for (int[] e : l) topOut.add(dv.lookupOrd(e[0]).utf8ToString() + ":" + e[1]);
        }
      }
      if (multi != null && topOut != null) {
        multi.entrySet().stream()
            .sorted((x, y) -> !x.getValue().equals(y.getValue()) ? Long.compare(y.getValue(), x.getValue()) : x.getKey().compareTo(y.getKey()))
            .limit(size).forEach(e -> topOut.add(e.getKey() + ":" + e.getValue()));
      }
      return hits[0];
    }
  }

  static long runOne(IndexSearcher s, Q q, TermsAgg agg) throws IOException {
    switch (q.mode) {
      case "count": return s.count(q.query);
      case "top": {
        // track_total_hits: false -> count no further than k
        return s.search(q.query, new TopScoreDocCollectorManager(q.k, q.k)).scoreDocs.length;
      }
      case "sort": {
        SortField sf = new SortedNumericSortField(q.field, SortField.Type.INT);
        return s.search(q.query, new TopFieldCollectorManager(new Sort(sf), q.k, null, q.k)).scoreDocs.length;
      }
      case "agg": return agg.run(s, q.query, q.field, q.k, null);
      default: throw new IllegalArgumentException("unknown mode " + q.mode);
    }
  }

  static List<Q> loadQueries(String path) throws IOException {
    List<Q> qs = new ArrayList<>();
    for (String line : Files.readAllLines(Paths.get(path), StandardCharsets.UTF_8)) {
      if (line.isBlank()) continue;
      Map<String, Object> o = obj(Json.parse(line));
      Map<String, Object> l = obj(o.get("lucene"));
      Q q = new Q();
      q.cls = (String) o.get("class");
      q.mode = (String) l.get("mode");
      q.k = ((Number) l.getOrDefault("k", 10L)).intValue();
      q.field = (String) l.get("field");
      q.query = build(obj(l.get("q")));
      q.expect = ((Number) o.get("expect")).longValue();
      qs.add(q);
    }
    return qs;
  }

  static void query(String[] a) throws Exception {
    String index = a[1], qfile = a[2];
    int repeat = Integer.parseInt(a[3]);
    List<Q> qs = loadQueries(qfile);
    DirectoryReader reader = DirectoryReader.open(FSDirectory.open(Paths.get(index)));
    IndexSearcher s = new IndexSearcher(reader);
    s.setQueryCache(null); // no result/query caches in any engine (BENCHMARKS.md rule 2)
    TermsAgg agg = new TermsAgg();
    // untimed validation pass: exact counts
    int bad = 0;
    for (Q q : qs) {
      q.count = q.mode.equals("agg") ? agg.run(s, q.query, q.field, q.k, null) : s.count(q.query);
      if (q.count != q.expect) bad++;
    }
    Map<String, List<Q>> byClass = new LinkedHashMap<>();
    for (Q q : qs) byClass.computeIfAbsent(q.cls, k -> new ArrayList<>()).add(q);
    // JIT warm-up: every class, a few rounds, untimed
    long sink = 0;
    // the JIT needs thousands of calls per hot method: at least 2 rounds and
    // 5 s, at most max(repeat, 50) rounds
    long warmEnd = System.nanoTime() + 5_000_000_000L;
    for (int r = 0; r < 2 || (r < Math.max(repeat, 50) && System.nanoTime() < warmEnd); r++)
      for (Q q : qs) sink += runOne(s, q, agg);
    for (Map.Entry<String, List<Q>> e : byClass.entrySet()) {
      List<Q> cq = e.getValue();
      long[] lat = new long[repeat * cq.size()];
      int m = 0;
      long b0 = System.nanoTime();
      for (int r = 0; r < repeat; r++) {
        for (Q q : cq) {
          long q0 = System.nanoTime();
          sink += runOne(s, q, agg);
          lat[m++] = System.nanoTime() - q0;
        }
      }
      double el = (System.nanoTime() - b0) / 1e9;
      Arrays.sort(lat);
      StringBuilder counts = new StringBuilder();
      int mism = 0;
      for (Q q : cq) {
        if (counts.length() > 0) counts.append(',');
        counts.append(q.count);
        if (q.count != q.expect) mism++;
      }
      System.out.printf(Locale.ROOT,
          "{\"engine\":\"lucene10\",\"class\":\"%s\",\"queries\":%d,\"runs\":%d,\"qps\":%.1f,\"p50_us\":%.1f," +
          "\"p99_us\":%.1f,\"counts\":[%s],\"mismatches\":%d}%n",
          e.getKey(), cq.size(), m, m / el, lat[(int) ((m - 1) * 0.5)] / 1e3, lat[(int) ((m - 1) * 0.99)] / 1e3,
          counts, mism);
    }
    System.err.printf("lucene10 %s: %d queries, %d count mismatches, docs=%d segments=%d (sink %d)%n",
        org.apache.lucene.util.Version.LATEST, qs.size(), bad, reader.numDocs(), reader.leaves().size(), sink);
    reader.close();
    if (bad > 0) System.exit(3);
  }

  // ---------------------------------------------------------------- scores
  static void scores(String[] a) throws Exception {
    String docs = a[1], qfile = a[2];
    Map<String, String> types = readMapping(a.length > 3 ? a[3] : null);
    Directory dir = new ByteBuffersDirectory();
    try (IndexWriter w = new IndexWriter(dir, new IndexWriterConfig(analyzer()));
         BufferedReader r = Files.newBufferedReader(Paths.get(docs), StandardCharsets.UTF_8)) {
      String line;
      while ((line = r.readLine()) != null) if (!line.isEmpty()) w.addDocument(toDoc(line, types));
      w.forceMerge(1);
    }
    DirectoryReader reader = DirectoryReader.open(dir);
    IndexSearcher s = new IndexSearcher(reader);
    int i = 0;
    for (String line : Files.readAllLines(Paths.get(qfile), StandardCharsets.UTF_8)) {
      if (line.isBlank()) continue;
      Map<String, Object> o = obj(Json.parse(line));
      Map<String, Object> l = obj(o.get("lucene"));
      int qi = i++;
      if (!"top".equals(l.get("mode"))) continue;
      TopDocs td = s.search(build(obj(l.get("q"))), 10);
      StringBuilder b = new StringBuilder();
      for (ScoreDoc sd : td.scoreDocs) {
        if (b.length() > 0) b.append(',');
        b.append(String.format(Locale.ROOT, "[\"%s\",%.9g]", s.storedFields().document(sd.doc).get("_id"), sd.score));
      }
      System.out.printf(Locale.ROOT, "{\"line\":%d,\"class\":\"%s\",\"hits\":[%s]}%n", qi, o.get("class"), b);
    }
    reader.close();
  }

  public static void main(String[] a) throws Exception {
    if (a.length < 1) {
      System.err.println("usage: Lucene10Bench index DOCS MAPPING OUT [--threads N] [--ram-mb M]\n" +
                         "       Lucene10Bench query INDEX QUERIES REPEAT\n" +
                         "       Lucene10Bench scores DOCS QUERIES [MAPPING]");
      System.exit(2);
    }
    switch (a[0]) {
      case "index": index(a); break;
      case "query": query(a); break;
      case "scores": scores(a); break;
      default: System.err.println("unknown command " + a[0]); System.exit(2);
    }
  }
}
