/* shoal-engine: the storage engine without the server, for benchmarks.
 *
 *   shoal-engine index --mapping M.json --in docs.ndjson --out DIR
 *                      [--ram-mb N] [--threads N] [--force-merge N] [--id-field F]
 *   shoal-engine merge --mapping M.json --index DIR [--max-segments N]
 *                      [--threads N] [--ram-mb N]
 *   shoal-engine query ...   (search/sr_engine.h)
 *
 * `index` reads one JSON source per line, applies batches of ~1000 docs
 * (ids from --id-field, else the line number), refreshes, optionally force
 * merges, and prints the figures the indexing benchmark tabulates. `merge`
 * opens an indexed shard directory (background merges off) and times a
 * force merge alone, so it can be profiled apart from indexing. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cm_alloc.h"
#include "common/cm_sys.h"
#include "search/sr_engine.h"
#include "storage/st_shard.h"

#define BATCH 1000
#define MAX_LINE ((size_t)64 << 20)

typedef struct index_args {
	const char *mapping, *in, *out, *id_field;
	size_t ram_mb;
	int threads, force_merge;
} index_args;

typedef struct feeder {
	pthread_mutex_t mu;
	FILE *f;
	uint64_t line_no, docs, failed;
	bool eof;
	const index_args *a;
	st_shard *shard;
	int reported;
} feeder;

static int
usage(void)
{
	fprintf(stderr, "usage: shoal-engine index --mapping M.json --in docs.ndjson --out DIR\n"
	                "                          [--ram-mb N] [--threads N] [--force-merge N] "
	                "[--id-field F]\n"
	                "       shoal-engine merge --mapping M.json --index DIR [--max-segments N] "
	                "[--threads N] [--ram-mb N]\n"
	                "       shoal-engine query ...\n"
	                "       shoal-engine sizes --index DIR   (bytes by segment section)\n");
	return 2;
}

static int
parse_index_args(int argc, char **argv, index_args *a)
{
	memset(a, 0, sizeof(*a));
	a->ram_mb = 64;
	a->threads = 2;
	for (int i = 2; i < argc; i++) {
		const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (v == NULL)
			return -1;
		if (strcmp(k, "--mapping") == 0)
			a->mapping = v;
		else if (strcmp(k, "--in") == 0)
			a->in = v;
		else if (strcmp(k, "--out") == 0)
			a->out = v;
		else if (strcmp(k, "--id-field") == 0)
			a->id_field = v;
		else if (strcmp(k, "--ram-mb") == 0)
			a->ram_mb = (size_t)strtoul(v, NULL, 10);
		else if (strcmp(k, "--threads") == 0)
			a->threads = atoi(v);
		else if (strcmp(k, "--force-merge") == 0)
			a->force_merge = atoi(v);
		else
			return -1;
		i++;
	}
	if (!a->mapping || !a->in || !a->out || a->threads < 1 || a->ram_mb < 1)
		return -1;
	return 0;
}

static st_mapping *
load_mapping(const char *path)
{
	char *text;
	size_t len;
	if (cm_file_read(path, 16 << 20, &text, &len) != CM_OK) {
		fprintf(stderr, "cannot read %s\n", path);
		return NULL;
	}
	cJSON *j = cJSON_ParseWithLength(text, len);
	cm_free(CM_MEM_COMMON, text);
	if (j == NULL) {
		fprintf(stderr, "%s: not JSON\n", path);
		return NULL;
	}
	/* Accept a bare mapping or an index body {"mappings": {...}}. */
	const cJSON *body = cJSON_GetObjectItemCaseSensitive(j, "mappings");
	st_mapping *m = NULL;
	cm_error err;
	cm_error_clear(&err);
	if (st_mapping_from_json(body ? body : j, &m, &err) != CM_OK)
		fprintf(stderr, "%s: %s\n", path, err.reason);
	cJSON_Delete(j);
	return m;
}

/* The id of one line: the --id-field's value, else the line number. */
static void
doc_id(const index_args *a, const char *line, size_t len, uint64_t line_no, cm_buf *ids)
{
	if (a->id_field) {
		cJSON *j = cJSON_ParseWithLength(line, len);
		const cJSON *v = j ? cJSON_GetObjectItemCaseSensitive(j, a->id_field) : NULL;
		if (cJSON_IsString(v)) {
			cm_buf_put(ids, v->valuestring, strlen(v->valuestring));
			cJSON_Delete(j);
			return;
		}
		if (cJSON_IsNumber(v)) {
			cm_buf_printf(ids, "%.0f", v->valuedouble);
			cJSON_Delete(j);
			return;
		}
		cJSON_Delete(j);
	}
	cm_buf_printf(ids, "%" PRIu64, line_no);
}

/* Reads up to BATCH lines under the feeder lock into text/ends. */
static size_t
read_batch(feeder *fd, cm_buf *text, size_t *ends, uint64_t *first_line)
{
	char *line = NULL;
	size_t cap = 0, n = 0;
	pthread_mutex_lock(&fd->mu);
	*first_line = fd->line_no + 1;
	while (n < BATCH && !fd->eof) {
		ssize_t l = getline(&line, &cap, fd->f);
		if (l < 0) {
			fd->eof = true;
			break;
		}
		fd->line_no++;
		while (l > 0 && (line[l - 1] == '\n' || line[l - 1] == '\r'))
			l--;
		if (l == 0 || (size_t)l > MAX_LINE)
			continue;
		cm_buf_put(text, line, (size_t)l);
		ends[n++] = text->len;
	}
	pthread_mutex_unlock(&fd->mu);
	free(line);
	return n;
}

static void *
feed_main(void *arg)
{
	feeder *fd = arg;
	cm_buf text, ids;
	cm_buf_init(&text, CM_MEM_COMMON);
	cm_buf_init(&ids, CM_MEM_COMMON);
	size_t *ends = malloc(BATCH * sizeof(*ends)), *id_ends = malloc(BATCH * sizeof(*id_ends));
	st_op *ops = malloc(BATCH * sizeof(*ops));
	st_op_result *res = malloc(BATCH * sizeof(*res));
	for (;;) {
		cm_buf_reset(&text);
		cm_buf_reset(&ids);
		uint64_t first;
		size_t n = read_batch(fd, &text, ends, &first);
		if (n == 0)
			break;
		for (size_t i = 0; i < n; i++) {
			size_t start = i ? ends[i - 1] : 0;
			doc_id(fd->a, (char *)text.data + start, ends[i] - start, first + i, &ids);
			id_ends[i] = ids.len;
		}
		for (size_t i = 0; i < n; i++) {
			size_t s0 = i ? ends[i - 1] : 0, i0 = i ? id_ends[i - 1] : 0;
			ops[i] = (st_op){.type = ST_OP_INDEX,
			                 .id = (char *)ids.data + i0,
			                 .id_len = id_ends[i] - i0,
			                 .source = (char *)text.data + s0,
			                 .source_len = ends[i] - s0,
			                 .seq_no = ST_NO_SEQ,
			                 .if_seq_no = ST_NO_SEQ};
		}
		cm_err e = st_shard_apply(fd->shard, ops, n, res);
		pthread_mutex_lock(&fd->mu);
		for (size_t i = 0; i < n; i++) {
			if (e == CM_OK && res[i].err == CM_OK) {
				fd->docs++;
				continue;
			}
			fd->failed++;
			if (fd->reported++ < 5)
				fprintf(stderr, "doc %.*s: %s %s\n", (int)ops[i].id_len, ops[i].id,
				        cm_err_name(e ? e : res[i].err), e ? "" : res[i].reason);
		}
		pthread_mutex_unlock(&fd->mu);
	}
	cm_buf_free(&text);
	cm_buf_free(&ids);
	free(ends);
	free(id_ends);
	free(ops);
	free(res);
	return NULL;
}

static int
cmd_index(int argc, char **argv)
{
	index_args a;
	if (parse_index_args(argc, argv, &a))
		return usage();
	st_mapping *m = load_mapping(a.mapping);
	if (m == NULL)
		return 1;
	feeder fd = {.a = &a};
	pthread_mutex_init(&fd.mu, NULL);
	fd.f = strcmp(a.in, "-") == 0 ? stdin : fopen(a.in, "r");
	if (fd.f == NULL) {
		fprintf(stderr, "cannot open %s\n", a.in);
		return 1;
	}
	cm_pool *pool = cm_pool_create(a.threads, "merge");
	/* The feeders' batches spread over --threads cores: each feeder
	 * runs a part of its batch beside up to threads - 1 helpers. */
	cm_pool *ipool = a.threads > 1 ? cm_pool_create(a.threads - 1, "index") : NULL;
	st_shard_opts o;
	st_shard_opts_default(&o);
	o.merge_pool = pool;
	o.index_pool = ipool;
	o.indexing_max_ram_mb = a.ram_mb;
	cm_error err;
	cm_error_clear(&err);
	uint64_t t0 = cm_now_ns();
	double c0 = cm_cpu_seconds();
	if (st_shard_open(a.out, m, &o, &fd.shard, &err) != CM_OK) {
		fprintf(stderr, "cannot open shard %s: %s\n", a.out, err.reason);
		return 1;
	}
	/* One feeder per thread: parsing runs in parallel, batches share
	 * log syncs. */
	pthread_t *th = calloc((size_t)a.threads, sizeof(*th));
	for (int i = 0; i < a.threads; i++)
		pthread_create(&th[i], NULL, feed_main, &fd);
	for (int i = 0; i < a.threads; i++)
		pthread_join(th[i], NULL);
	cm_err e = st_shard_refresh(fd.shard);
	double searchable = (double)(cm_now_ns() - t0) / 1e9,
	       cpu_searchable = cm_cpu_seconds() - c0;
	double fm_wall = 0, fm_cpu = 0;
	if (e == CM_OK && a.force_merge > 0) {
		uint64_t f0 = cm_now_ns();
		double fc0 = cm_cpu_seconds();
		e = st_shard_force_merge(fd.shard, a.force_merge);
		fm_wall = (double)(cm_now_ns() - f0) / 1e9;
		fm_cpu = cm_cpu_seconds() - fc0;
	}
	if (e == CM_OK)
		e = st_shard_flush(fd.shard);
	st_shard_stats st;
	st_shard_stats_get(fd.shard, &st);
	double total = (double)(cm_now_ns() - t0) / 1e9, cpu = cm_cpu_seconds() - c0;
	st_shard_close(fd.shard);
	cm_pool_destroy(pool);
	if (ipool)
		cm_pool_destroy(ipool);
	if (fd.f != stdin)
		fclose(fd.f);
	st_mapping_unref(m);
	if (e) {
		fprintf(stderr, "indexing failed: %s\n", cm_err_name(e));
		return 1;
	}
	printf("docs: %" PRIu64 "\n", fd.docs);
	printf("failed: %" PRIu64 "\n", fd.failed);
	printf("docs_per_s: %.0f\n", searchable > 0 ? (double)fd.docs / searchable : 0);
	printf("searchable_s: %.3f\n", searchable);
	printf("cpu_searchable_s: %.3f\n", cpu_searchable);
	printf("force_merge_s: %.3f\n", fm_wall);
	printf("force_merge_cpu_s: %.3f\n", fm_cpu);
	printf("force_merge_busy_threads: %.2f\n", fm_wall > 0 ? fm_cpu / fm_wall : 0);
	printf("total_s: %.3f\n", total);
	printf("cpu_s: %.3f\n", cpu);
	printf("docs_per_cpu_s: %.0f\n", cpu > 0 ? (double)fd.docs / cpu : 0);
	printf("index_bytes: %" PRId64 "\n", cm_dir_bytes(a.out));
	printf("segments: %" PRIu64 "\n", st.segments);
	printf("live_docs: %" PRIu64 "\n", st.docs);
	printf("refreshes: %" PRIu64 "\n", st.refreshes);
	printf("merges: %" PRIu64 "\n", st.merges);
	return fd.failed ? 3 : 0;
}

/* Force merges an existing shard directory, timed alone. */
static int
cmd_merge(int argc, char **argv)
{
	const char *mapping = NULL, *dir = NULL;
	int threads = 2, max_segments = 1;
	size_t ram_mb = 64;
	for (int i = 2; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];
		if (strcmp(k, "--mapping") == 0)
			mapping = v;
		else if (strcmp(k, "--index") == 0)
			dir = v;
		else if (strcmp(k, "--threads") == 0)
			threads = atoi(v);
		else if (strcmp(k, "--max-segments") == 0)
			max_segments = atoi(v);
		else if (strcmp(k, "--ram-mb") == 0)
			ram_mb = (size_t)strtoul(v, NULL, 10);
		else
			return usage();
	}
	if (argc % 2 || !mapping || !dir || threads < 1 || max_segments < 1 || ram_mb < 1)
		return usage();
	st_mapping *m = load_mapping(mapping);
	if (m == NULL)
		return 1;
	cm_pool *pool = cm_pool_create(threads, "merge");
	st_shard_opts o;
	st_shard_opts_default(&o);
	o.merge_pool = pool;
	o.indexing_max_ram_mb = ram_mb;
	o.background_merges = false;
	cm_error err;
	cm_error_clear(&err);
	st_shard *s;
	if (st_shard_open(dir, m, &o, &s, &err) != CM_OK) {
		fprintf(stderr, "cannot open shard %s: %s\n", dir, err.reason);
		return 1;
	}
	st_shard_stats before;
	st_shard_stats_get(s, &before);
	uint64_t f0 = cm_now_ns();
	double fc0 = cm_cpu_seconds();
	cm_err e = st_shard_force_merge(s, max_segments);
	double wall = (double)(cm_now_ns() - f0) / 1e9, cpu = cm_cpu_seconds() - fc0;
	st_shard_stats st;
	st_shard_stats_get(s, &st);
	st_shard_close(s);
	cm_pool_destroy(pool);
	st_mapping_unref(m);
	if (e) {
		fprintf(stderr, "force merge failed: %s\n", cm_err_name(e));
		return 1;
	}
	printf("segments_before: %" PRIu64 "\n", before.segments);
	printf("force_merge_s: %.3f\n", wall);
	printf("force_merge_cpu_s: %.3f\n", cpu);
	printf("force_merge_busy_threads: %.2f\n", wall > 0 ? cpu / wall : 0);
	printf("segments: %" PRIu64 "\n", st.segments);
	printf("live_docs: %" PRIu64 "\n", st.docs);
	printf("index_bytes: %" PRId64 "\n", cm_dir_bytes(dir));
	return 0;
}

/* LMDB's share of the files, page by page: what the section table's
 * "LMDB pages" row is made of. Leaf pages hold the small entries, each
 * with an 8-byte node header and a 2-byte slot; an entry whose node would
 * exceed half a page keeps its key (and an 8-byte page number) on the
 * leaf and its value on a run of overflow pages. */
static void
print_pages(const st_seg_section *tot, const st_seg_pages *pg, uint64_t nseg, uint64_t file_bytes)
{
	uint64_t entries = 0, kv = 0, big = 0, big_bytes = 0, slack = 0;
	for (int t = 0; t < 256; t++) {
		entries += tot[t].entries;
		kv += tot[t].key_bytes + tot[t].value_bytes;
		big += tot[t].big_values;
		big_bytes += tot[t].big_bytes;
		slack += tot[t].big_slack;
	}
	uint64_t ps = pg->psize ? pg->psize : 4096;
	uint64_t heads = entries * 10 + big * 8;
	uint64_t leaf_used = pg->leaf * 16 + heads + kv - big_bytes;
	uint64_t leaf_bytes = pg->leaf * ps;
	uint64_t meta = 2 * nseg * ps;
	uint64_t known = meta + leaf_bytes + (pg->branch + pg->overflow + pg->free) * ps;
	uint64_t other = pg->total * ps > known ? pg->total * ps - known : 0;
	double f = file_bytes ? 100.0 / (double)file_bytes : 0;
	printf("\nLMDB pages (%" PRIu64 " bytes, tree depth up to %" PRIu64 "):\n\n"
	       "| pages | count | bytes | share |\n|---|---|---|---|\n", ps, pg->depth);
	printf("| leaf | %" PRIu64 " | %" PRIu64 " | %.1f%% |\n", pg->leaf, leaf_bytes,
	       f * (double)leaf_bytes);
	printf("| - of it page and node headers (16 a page, 10 an entry) | | %" PRIu64 " | %.1f%% |\n",
	       pg->leaf * 16 + heads, f * (double)(pg->leaf * 16 + heads));
	printf("| - of it unused | | %" PRIu64 " | %.1f%% |\n",
	       leaf_bytes > leaf_used ? leaf_bytes - leaf_used : 0,
	       f * (double)(leaf_bytes > leaf_used ? leaf_bytes - leaf_used : 0));
	printf("| branch | %" PRIu64 " | %" PRIu64 " | %.1f%% |\n", pg->branch, pg->branch * ps,
	       f * (double)(pg->branch * ps));
	printf("| overflow (%" PRIu64 " values) | %" PRIu64 " | %" PRIu64 " | %.1f%% |\n", big,
	       pg->overflow, pg->overflow * ps, f * (double)(pg->overflow * ps));
	printf("| - of it unused tails and headers | | %" PRIu64 " | %.1f%% |\n", slack,
	       f * (double)slack);
	printf("| free list | %" PRIu64 " | %" PRIu64 " | %.1f%% |\n", pg->free, pg->free * ps,
	       f * (double)(pg->free * ps));
	printf("| meta (2 a file) | %" PRIu64 " | %" PRIu64 " | %.1f%% |\n", 2 * nseg, meta,
	       f * (double)meta);
	printf("| other (the free list's own pages) | %" PRIu64 " | %" PRIu64 " | %.1f%% |\n",
	       other / ps, other, f * (double)other);
}

/* The byte table of every segment file under DIR (a shard directory),
 * by section, summed: where an index's bytes go. */
static int
cmd_sizes(int argc, char **argv)
{
	if (argc != 4 || strcmp(argv[2], "--index"))
		return usage();
	static const struct {
		char tag;
		const char *what;
	} names[] = {{'T', "terms (T keys) + postings (T values)"},
	             {'P', "positions"},
	             {'N', "norms"},
	             {'C', "columns (doc values)"},
	             {'K', "ordinal samples"},
	             {'S', "stored _source (zstd)"},
	             {'Z', "zstd dictionary"},
	             {'I', "ids"},
	             {'F', "field infos"},
	             {'M', "meta"}};
	st_seg_section tot[256] = {{0}};
	st_seg_pages pg = {0};
	uint64_t file_bytes = 0, nseg = 0;
	char cmd[4096];
	snprintf(cmd, sizeof cmd, "find '%s' -name 'seg-*.mdb' -type f", argv[3]);
	FILE *f = popen(cmd, "r");
	char path[4096];
	while (f && fgets(path, sizeof path, f)) {
		path[strcspn(path, "\n")] = 0;
		st_segment *seg;
		cm_error err;
		cm_error_clear(&err);
		if (st_segment_open(path, &seg, &err) != CM_OK) {
			fprintf(stderr, "%s: %s\n", path, err.reason);
			continue;
		}
		st_seg_section by[256];
		if (st_segment_sections(seg, by) == CM_OK)
			for (int t = 0; t < 256; t++) {
				tot[t].entries += by[t].entries;
				tot[t].key_bytes += by[t].key_bytes;
				tot[t].value_bytes += by[t].value_bytes;
				tot[t].big_values += by[t].big_values;
				tot[t].big_bytes += by[t].big_bytes;
				tot[t].big_slack += by[t].big_slack;
			}
		st_seg_pages p;
		if (st_segment_pages(seg, &p) == CM_OK) {
			pg.psize = p.psize;
			pg.depth = p.depth > pg.depth ? p.depth : pg.depth;
			pg.branch += p.branch;
			pg.leaf += p.leaf;
			pg.overflow += p.overflow;
			pg.free += p.free;
			pg.total += p.total;
		}
		file_bytes += st_segment_bytes(seg);
		nseg++;
		st_segment_close(seg);
	}
	if (f)
		pclose(f);
	uint64_t sum = 0;
	printf("| section | entries | key bytes | value bytes | total | share | values on overflow "
	       "pages | their unused bytes |\n|---|---|---|---|---|---|---|---|\n");
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		st_seg_section *x = &tot[(uint8_t)names[i].tag];
		uint64_t b = x->key_bytes + x->value_bytes;
		sum += b;
		printf("| %c %s | %" PRIu64 " | %" PRIu64 " | %" PRIu64 " | %" PRIu64 " | %.1f%% | %" PRIu64
		       " | %" PRIu64 " |\n",
		       names[i].tag, names[i].what, x->entries, x->key_bytes, x->value_bytes, b,
		       file_bytes ? 100.0 * (double)b / (double)file_bytes : 0, x->big_values,
		       x->big_slack);
	}
	printf("| LMDB pages, free space and trailer | | | | %" PRIu64 " | %.1f%% |\n",
	       file_bytes - sum, file_bytes ? 100.0 * (double)(file_bytes - sum) / (double)file_bytes : 0);
	printf("| all (%" PRIu64 " segment files) | | | | %" PRIu64 " | 100%% |\n", nseg, file_bytes);
	print_pages(tot, &pg, nseg, file_bytes);
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc < 2)
		return usage();
	if (strcmp(argv[1], "index") == 0)
		return cmd_index(argc, argv);
	if (strcmp(argv[1], "query") == 0)
		return sr_engine_query_main(argc - 1, argv + 1);
	if (strcmp(argv[1], "sizes") == 0)
		return cmd_sizes(argc, argv);
	if (strcmp(argv[1], "merge") == 0)
		return cmd_merge(argc, argv);
	return usage();
}
