/* The fs repository format: locations, blobs (dedupe, verification),
 * the catalogue, manifests, delete with garbage collection, the wire
 * messages. SN_BENCH=1 prints the hashing and copy throughput. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "common/cm_alloc.h"
#include "common/cm_sys.h"
#include "snapshot/sn.h"

static char root[256];

static void
write_file(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	REQUIRE(f);
	REQUIRE(fwrite(data, 1, n, f) == n);
	fclose(f);
}

static size_t
count_files(const char *dir)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "find '%s' -type f | wc -l", dir);
	FILE *p = popen(cmd, "r");
	size_t n = 0;
	if (p) {
		if (fscanf(p, "%zu", &n) != 1)
			n = 0;
		pclose(p);
	}
	return n;
}

static void
test_locations(void)
{
	char base[300], out[4096], p[400];
	cm_error err;
	snprintf(base, sizeof(base), "%s/pr", root);
	cm_mkdir_p(base);
	snprintf(p, sizeof(p), "%s/outside", root);
	cm_mkdir_p(p);
	snprintf(p, sizeof(p), "%s/pr/link", root);
	REQUIRE(symlink("../outside", p) == 0);

	cm_error_clear(&err);
	CHECK(sn_location_check(base, "a/b", out, sizeof(out), &err) == CM_OK);
	CHECK(strncmp(out, base, strlen(base)) == 0 && strstr(out, "/a/b"));
	snprintf(p, sizeof(p), "%s/new/deeper", base);
	CHECK(sn_location_check(base, p, out, sizeof(out), &err) == CM_OK);
	CHECK(sn_location_check(base, base, out, sizeof(out), &err) == CM_OK);
	const char *bad[] = {"../outside", "a/../../outside", "/etc", "link", "link/x", "", NULL};
	for (int i = 0; bad[i]; i++) {
		cm_error_clear(&err);
		CHECKF(sn_location_check(base, bad[i], out, sizeof(out), &err) == CM_EINVAL, "%s",
		       bad[i]);
		CHECK(strcmp(cm_error_type(&err), "repository_exception") == 0);
	}
	/* a missing part followed by ".." cannot climb out either */
	cm_error_clear(&err);
	CHECK(sn_location_check(base, "nothere/../../outside", out, sizeof(out), &err) ==
	      CM_EINVAL);
	cm_error_clear(&err);
	CHECK(sn_location_check("", "x", out, sizeof(out), &err) == CM_EINVAL);
	cm_error_clear(&err);
	snprintf(p, sizeof(p), "%s/prefix-sibling", root);
	cm_mkdir_p(p);
	/* ".../pr" must not admit ".../pr-sibling" */
	snprintf(p, sizeof(p), "%s/pr-sibling", root);
	cm_mkdir_p(p);
	CHECK(sn_location_check(base, p, out, sizeof(out), &err) == CM_EINVAL);

	uint64_t v;
	CHECK(sn_parse_bytes("40mb", &v) && v == 40ull << 20);
	CHECK(sn_parse_bytes("512kb", &v) && v == 512ull << 10);
	CHECK(sn_parse_bytes("100", &v) && v == 100);
	CHECK(sn_parse_bytes("-1", &v) && v == 0);
	CHECK(!sn_parse_bytes("fast", &v) && !sn_parse_bytes("", &v) && !sn_parse_bytes("-5", &v));
}

static void
test_blobs_and_catalogue(void)
{
	char loc[300], f1[300], f2[300], bp[600];
	sn_repo *r;
	cm_error err;
	sn_blob a, b, c;
	uint64_t w;
	snprintf(loc, sizeof(loc), "%s/repo", root);
	cm_error_clear(&err);
	REQUIRE(sn_repo_open(loc, 0, &r, &err) == CM_OK);

	size_t n = 300000;
	char *data = malloc(n);
	for (size_t i = 0; i < n; i++)
		data[i] = (char)(i * 2654435761u >> 13);
	snprintf(f1, sizeof(f1), "%s/f1", root);
	snprintf(f2, sizeof(f2), "%s/f2", root);
	write_file(f1, data, n);
	data[77] ^= 1;
	write_file(f2, data, n);

	CHECK(sn_blob_put(r, f1, &a, &w, &err) == CM_OK && w == n && a.size == n);
	CHECK(sn_blob_put(r, f1, &b, &w, &err) == CM_OK && w == 0); /* already there */
	CHECK(strcmp(a.key, b.key) == 0);
	CHECK(sn_blob_put(r, f2, &c, &w, &err) == CM_OK && w == n);
	CHECK(strcmp(a.key, c.key) != 0);

	char out[300];
	snprintf(out, sizeof(out), "%s/restored", root);
	CHECK(sn_blob_get(r, &a, "f1", out, &err) == CM_OK);
	char *back;
	size_t bl;
	REQUIRE(cm_file_read(out, 1 << 20, &back, &bl) == CM_OK);
	CHECK(bl == n && memcmp(back, data, 77) == 0 && back[77] == (char)(data[77] ^ 1));
	cm_free(CM_MEM_COMMON, back);
	unlink(out);

	/* corrupt, truncated, missing: each named */
	sn_blob_path(r, c.key, bp, sizeof(bp));
	data[1000] ^= 0x20; /* c's content with one more flipped byte */
	write_file(bp, data, n);
	cm_error_clear(&err);
	CHECK(sn_blob_check(r, &c, "seg-7.mdb", &err) == CM_ECORRUPT);
	CHECK(strstr(err.reason, "seg-7.mdb") && strstr(err.reason, "corrupt"));
	cm_error_clear(&err);
	CHECK(sn_blob_get(r, &c, "seg-7.mdb", out, &err) == CM_ECORRUPT);
	CHECK(access(out, F_OK) != 0); /* nothing half-restored left */
	truncate(bp, 1000);
	cm_error_clear(&err);
	CHECK(sn_blob_check(r, &c, "seg-7.mdb", &err) == CM_ECORRUPT &&
	      strstr(err.reason, "truncated"));
	unlink(bp);
	cm_error_clear(&err);
	CHECK(sn_blob_check(r, &c, "seg-7.mdb", &err) == CM_ECORRUPT &&
	      strstr(err.reason, "missing"));
	cm_error_clear(&err);
	CHECK(sn_blob_put(r, f2, &c, &w, &err) == CM_OK && w == n); /* written again */

	/* the catalogue and manifests */
	char uuid1[40], uuid2[40];
	cm_error_clear(&err);
	CHECK(sn_snapshot_begin(r, "Bad", uuid1, &err) == CM_EINVAL);
	cm_error_clear(&err);
	REQUIRE(sn_snapshot_begin(r, "one", uuid1, &err) == CM_OK);
	cm_error_clear(&err);
	CHECK(sn_snapshot_begin(r, "one", uuid2, &err) == CM_EINVAL); /* running */
	CHECK(sn_snapshot_pending(r, "one"));
	cJSON *m1 = cJSON_Parse("{\"indices\":{\"i\":{\"shards\":[{\"files\":[]}]}}}");
	cJSON *files = cJSON_GetObjectItem(
	    cJSON_GetArrayItem(
	        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(m1, "indices"), "i"),
	                            "shards"),
	        0),
	    "files");
	cJSON_AddItemToArray(files, sn_file_json("seg-1.mdb", &a));
	cJSON_AddItemToArray(files, sn_file_json("seg-2.mdb", &c));
	sn_entry e = {0};
	snprintf(e.name, sizeof(e.name), "one");
	snprintf(e.uuid, sizeof(e.uuid), "%s", uuid1);
	snprintf(e.state, sizeof(e.state), "SUCCESS");
	cm_error_clear(&err);
	REQUIRE(sn_snapshot_commit(r, &e, m1, &err) == CM_OK);
	CHECK(!sn_snapshot_pending(r, "one"));
	cm_error_clear(&err);
	CHECK(sn_snapshot_begin(r, "one", uuid2, &err) == CM_EINVAL); /* exists */

	/* "two" keeps only a */
	cm_error_clear(&err);
	REQUIRE(sn_snapshot_begin(r, "two", uuid2, &err) == CM_OK);
	cJSON *m2 = cJSON_Duplicate(m1, 1);
	cJSON *f2s = cJSON_GetObjectItem(
	    cJSON_GetArrayItem(
	        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(m2, "indices"), "i"),
	                            "shards"),
	        0),
	    "files");
	cJSON_DeleteItemFromArray(f2s, 1);
	snprintf(e.name, sizeof(e.name), "two");
	snprintf(e.uuid, sizeof(e.uuid), "%s", uuid2);
	REQUIRE(sn_snapshot_commit(r, &e, m2, &err) == CM_OK);

	sn_entry *all;
	size_t na;
	REQUIRE(sn_catalog_read(r, &all, &na, &err) == CM_OK);
	CHECK(na == 2 && strcmp(all[0].name, "one") == 0 && strcmp(all[1].name, "two") == 0);
	cm_free(CM_MEM_NODE, all);
	cJSON *got = NULL;
	sn_entry ge;
	CHECK(sn_snapshot_read(r, "one", &got, &ge, &err) == CM_OK && got);
	CHECK(strcmp(ge.uuid, uuid1) == 0);
	cJSON_Delete(got);
	cm_error_clear(&err);
	CHECK(sn_snapshot_read(r, "nope", NULL, &ge, &err) == CM_ENOTFOUND);
	CHECK(strcmp(cm_error_type(&err), "snapshot_missing_exception") == 0);

	/* a pending snapshot protects what it touched: c is put (touched) by
	 * "three" before "one" is deleted */
	char uuid3[40];
	uint64_t nb, bytes;
	cm_error_clear(&err);
	REQUIRE(sn_snapshot_begin(r, "three", uuid3, &err) == CM_OK);
	sleep(1); /* file times: the marker must be older than the touch */
	CHECK(sn_blob_put(r, f2, &c, &w, &err) == CM_OK && w == 0);
	cm_error_clear(&err);
	CHECK(sn_snapshot_delete(r, "one", &nb, &bytes, &err) == CM_OK);
	sn_blob_path(r, c.key, bp, sizeof(bp));
	CHECK(access(bp, F_OK) == 0);
	sn_snapshot_abort(r, "three");
	/* with no snapshot pending, deleting "two" collects c and a */
	cm_error_clear(&err);
	CHECK(sn_snapshot_delete(r, "two", &nb, &bytes, &err) == CM_OK);
	CHECK(nb == 2 && bytes == 2 * n);
	char bdir[400];
	snprintf(bdir, sizeof(bdir), "%s/blobs", loc);
	CHECK(count_files(bdir) == 0);
	cm_error_clear(&err);
	CHECK(sn_snapshot_delete(r, "two", &nb, &bytes, &err) == CM_ENOTFOUND);
	REQUIRE(sn_catalog_read(r, &all, &na, &err) == CM_OK);
	CHECK(na == 0);
	cm_free(CM_MEM_NODE, all);

	/* a manifest file entry that names a path is refused */
	cJSON *badf =
	    cJSON_Parse("{\"name\":\"../x\",\"blob\":\"0123456789abcdef0123456789abcdef\","
	                "\"size\":1}");
	char nm[SN_NAME_MAX];
	sn_blob bb;
	CHECK(!sn_file_parse(badf, nm, &bb));
	cJSON_Delete(badf);

	if (getenv("SN_BENCH")) {
		size_t big = 256u << 20;
		char *d = malloc(big);
		for (size_t i = 0; i < big; i++)
			d[i] = (char)(i * 2654435761u >> 11);
		snprintf(f1, sizeof(f1), "%s/big", root);
		write_file(f1, d, big);
		free(d);
		double t0 = (double)cm_now_ns();
		CHECK(sn_blob_put(r, f1, &a, &w, &err) == CM_OK);
		double t1 = (double)cm_now_ns();
		CHECK(sn_blob_put(r, f1, &a, &w, &err) == CM_OK && w == 0);
		double t2 = (double)cm_now_ns();
		printf("blob put (hash + copy + hash + fsync): %.0f MB/s; dedupe (hash only): %.0f "
		       "MB/s\n",
		       big / 1048576.0 / ((t1 - t0) / 1e9), big / 1048576.0 / ((t2 - t1) / 1e9));
	}
	cJSON_Delete(m1);
	cJSON_Delete(m2);
	free(data);
	sn_repo_close(r);
}

typedef struct throttle_arg {
	sn_repo *r;
	const char *path;
	cm_err rc;
} throttle_arg;

static void *
put_thread(void *p)
{
	throttle_arg *a = p;
	sn_blob b;
	uint64_t w;
	cm_error err;
	cm_error_clear(&err);
	a->rc = sn_blob_put(a->r, a->path, &b, &w, &err);
	return NULL;
}

static void
test_throttle(void)
{
	char loc[300], f[300];
	sn_repo *r;
	cm_error err;
	sn_blob b;
	uint64_t w;
	snprintf(loc, sizeof(loc), "%s/slow", root);
	cm_error_clear(&err);
	REQUIRE(sn_repo_open(loc, 1 << 20, &r, &err) == CM_OK); /* 1 MB/s */
	char *d = calloc(1, 512 << 10);
	snprintf(f, sizeof(f), "%s/half", root);
	write_file(f, d, 512 << 10);
	free(d);
	uint64_t t0 = cm_now_ns();
	CHECK(sn_blob_put(r, f, &b, &w, &err) == CM_OK && w == 512u << 10);
	double s = (double)(cm_now_ns() - t0) / 1e9;
	CHECKF(s >= 0.45, "512 KB at 1 MB/s took %.3f s", s);
	CHECK(sn_throttle_ns() > 0);
	/* the budget is the process's: two copies at once share 1 MB/s */
	char f2[300];
	d = calloc(1, 512 << 10);
	d[0] = 1; /* another blob */
	snprintf(f2, sizeof(f2), "%s/half2", root);
	write_file(f2, d, 512 << 10);
	d[0] = 2;
	snprintf(f, sizeof(f), "%s/half3", root);
	write_file(f, d, 512 << 10);
	free(d);
	sn_repo *r2;
	REQUIRE(sn_repo_open(loc, 1 << 20, &r2, &err) == CM_OK);
	throttle_arg a1 = {r, f2, CM_OK}, a2 = {r2, f, CM_OK};
	pthread_t t1, t2;
	t0 = cm_now_ns();
	pthread_create(&t1, NULL, put_thread, &a1);
	pthread_create(&t2, NULL, put_thread, &a2);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	s = (double)(cm_now_ns() - t0) / 1e9;
	CHECK(a1.rc == CM_OK && a2.rc == CM_OK);
	CHECKF(s >= 0.9, "2 x 512 KB at once at 1 MB/s took %.3f s", s);
	sn_repo_close(r2);
	sn_repo_close(r);
}

static void
test_wire(void)
{
	cm_buf b;
	cm_error err;
	sn_msg_shard m = {.op = SN_SHARD_UPLOAD, .max_bps = 7, .shard = 3, .file = 9};
	strcpy(m.location, "/r");
	strcpy(m.index, "idx");
	strcpy(m.token, "tok");
	cm_buf_init(&b, CM_MEM_NODE);
	sn_msg_shard_encode(&m, &b);
	sn_msg_shard back;
	cm_error_clear(&err);
	CHECK(sn_msg_shard_decode(b.data, b.len, &back, &err) == CM_OK);
	CHECK(back.op == SN_SHARD_UPLOAD && back.shard == 3 && back.file == 9 &&
	      back.max_bps == 7 && strcmp(back.index, "idx") == 0 &&
	      strcmp(back.token, "tok") == 0);
	cm_buf_reset(&b);
	sn_file files[2] = {{.name = "seg-1.mdb", .b = {.key = "00", .size = 5}},
	                    {.name = "shard.mdb", .b = {.key = "", .size = 6}}};
	sn_msg_shard_reply rep = {.files = files, .nfiles = 2, .max_seq_no = 42, .written = 5};
	strcpy(rep.token, "t");
	sn_msg_shard_reply_encode(&rep, &b);
	sn_msg_shard_reply rb;
	CHECK(sn_msg_shard_reply_decode(b.data, b.len, &rb, &err) == CM_OK);
	CHECK(rb.nfiles == 2 && strcmp(rb.files[1].name, "shard.mdb") == 0 &&
	      rb.files[1].b.size == 6 && rb.max_seq_no == 42);
	sn_msg_files_free(rb.files);
	/* garbage and an op out of range are refused */
	static const uint8_t junk[] = {0xff, 0xff, 0xff, 0x01};
	cm_error_clear(&err);
	CHECK(sn_msg_shard_decode(junk, sizeof(junk), &back, &err) == CM_EPARSE);
	cm_buf_free(&b);
}

/* Writers add snapshots through their own handles while a reader reads
 * the catalogue: every read succeeds and sees a prefix-consistent list;
 * at the end every snapshot is there once. */
typedef struct cc_arg {
	const char *loc;
	int id, n, bad;
	volatile int *stop;
} cc_arg;

static void *
cc_writer(void *p)
{
	cc_arg *a = p;
	sn_repo *r;
	cm_error err;
	cm_error_clear(&err);
	if (sn_repo_open(a->loc, 0, &r, &err)) {
		a->bad++;
		return NULL;
	}
	for (int i = 0; i < a->n; i++) {
		sn_entry e = {0};
		cJSON *m = cJSON_Parse("{\"indices\":{}}");
		snprintf(e.name, sizeof(e.name), "w%d-%d", a->id, i);
		snprintf(e.state, sizeof(e.state), "SUCCESS");
		cm_error_clear(&err);
		if (sn_snapshot_begin(r, e.name, e.uuid, &err) ||
		    sn_snapshot_commit(r, &e, m, &err))
			a->bad++;
		cJSON_Delete(m);
	}
	sn_repo_close(r);
	return NULL;
}

static void *
cc_reader(void *p)
{
	cc_arg *a = p;
	sn_repo *r;
	cm_error err;
	cm_error_clear(&err);
	if (sn_repo_open(a->loc, 0, &r, &err)) {
		a->bad++;
		return NULL;
	}
	size_t last = 0;
	while (!*a->stop) {
		sn_entry *all;
		size_t n;
		cm_error_clear(&err);
		if (sn_catalog_read(r, &all, &n, &err) != CM_OK || n < last)
			a->bad++;
		else
			last = n;
		cm_free(CM_MEM_NODE, all);
		a->n++;
	}
	sn_repo_close(r);
	return NULL;
}

static void
test_concurrent(void)
{
	char loc[300];
	pthread_t w[2], rd;
	volatile int stop = 0;
	snprintf(loc, sizeof(loc), "%s/cc", root);
	cc_arg wa[2] = {{loc, 0, 25, 0, &stop}, {loc, 1, 25, 0, &stop}};
	cc_arg ra = {loc, 9, 0, 0, &stop};
	sn_repo *r;
	cm_error err;
	cm_error_clear(&err);
	REQUIRE(sn_repo_open(loc, 0, &r, &err) == CM_OK);
	REQUIRE(pthread_create(&rd, NULL, cc_reader, &ra) == 0);
	for (int i = 0; i < 2; i++)
		REQUIRE(pthread_create(&w[i], NULL, cc_writer, &wa[i]) == 0);
	for (int i = 0; i < 2; i++)
		pthread_join(w[i], NULL);
	stop = 1;
	pthread_join(rd, NULL);
	CHECK(wa[0].bad == 0 && wa[1].bad == 0);
	CHECKF(ra.bad == 0, "%d of %d catalogue reads failed or went back", ra.bad, ra.n);
	sn_entry *all;
	size_t n;
	REQUIRE(sn_catalog_read(r, &all, &n, &err) == CM_OK);
	CHECKF(n == 50, "%zu snapshots in the catalogue", n);
	cm_free(CM_MEM_NODE, all);
	sn_repo_close(r);
}

/* compress: true: blobs as zstd frames under <key>.zst (same key), the
 * catalogue and manifests compressed; a handle without compress reads
 * them all; a flipped or cut compressed blob is refused by name; delete
 * collects .zst blobs like raw ones. */
static void
test_compressed(void)
{
	char loc[300], f1[300], bp[600], out[300], raw[700];
	sn_repo *z, *plain;
	cm_error err;
	sn_blob a, b;
	uint64_t w;
	snprintf(loc, sizeof(loc), "%s/zrepo", root);
	cm_error_clear(&err);
	REQUIRE(sn_repo_open(loc, 0, &z, &err) == CM_OK);
	sn_repo_set_compress(z, true);
	REQUIRE(sn_repo_open(loc, 0, &plain, &err) == CM_OK);

	size_t n = 400000;
	char *data = malloc(n);
	for (size_t i = 0; i < n; i++)
		data[i] = (char)('a' + (i % 7) + (i % 1000 == 0)); /* compressible */
	snprintf(f1, sizeof(f1), "%s/zf1", root);
	write_file(f1, data, n);
	CHECK(sn_blob_put(z, f1, &a, &w, &err) == CM_OK && a.size == n && w == n);
	sn_blob_path(z, a.key, bp, sizeof(bp));
	struct stat sb;
	CHECK(strstr(bp, ".zst") && stat(bp, &sb) == 0 && (size_t)sb.st_size < n / 10);
	snprintf(raw, sizeof(raw), "%s/blobs/%.2s/%s", loc, a.key, a.key);
	CHECK(access(raw, F_OK) != 0);
	CHECK(sn_blob_put(plain, f1, &b, &w, &err) == CM_OK && w == 0); /* deduped across modes */
	snprintf(out, sizeof(out), "%s/zrestored", root);
	CHECK(sn_blob_get(plain, &a, "zf1", out, &err) == CM_OK);
	char *back;
	size_t bl;
	REQUIRE(cm_file_read(out, 1 << 20, &back, &bl) == CM_OK);
	CHECK(bl == n && memcmp(back, data, n) == 0);
	cm_free(CM_MEM_COMMON, back);
	unlink(out);
	CHECK(sn_blob_check(plain, &a, "zf1", &err) == CM_OK);

	/* metadata */
	char uuid[40];
	REQUIRE(sn_snapshot_begin(z, "zs", uuid, &err) == CM_OK);
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "marker", "compressed manifest");
	sn_entry e;
	memset(&e, 0, sizeof(e));
	snprintf(e.name, sizeof(e.name), "zs");
	snprintf(e.uuid, sizeof(e.uuid), "%s", uuid);
	snprintf(e.state, sizeof(e.state), "SUCCESS");
	CHECK(sn_snapshot_commit(z, &e, m, &err) == CM_OK);
	cJSON_Delete(m);
	char mp[700];
	snprintf(mp, sizeof(mp), "%s/snap-%s.json", loc, uuid);
	char *mt;
	size_t ml;
	REQUIRE(cm_file_read(mp, 1 << 20, &mt, &ml) == CM_OK);
	CHECK(ml >= 4 && (uint8_t)mt[0] == 0x28 && (uint8_t)mt[3] == 0xfd);
	cm_free(CM_MEM_COMMON, mt);
	cJSON *rm = NULL;
	sn_entry e2;
	CHECK(sn_snapshot_read(plain, "zs", &rm, &e2, &err) == CM_OK);
	const cJSON *mk = cJSON_GetObjectItemCaseSensitive(rm, "marker");
	CHECK(cJSON_IsString(mk) && strcmp(mk->valuestring, "compressed manifest") == 0);
	cJSON_Delete(rm);
	sn_entry *cat = NULL;
	size_t ncat = 0;
	CHECK(sn_catalog_read(plain, &cat, &ncat, &err) == CM_OK && ncat == 1);
	cm_free(CM_MEM_NODE, cat);

	/* a manifest that is a broken zstd frame, or one claiming a huge size,
	 * is refused as corrupt, never decoded past the bound */
	uint8_t bogus[64] = {0x28, 0xb5, 0x2f, 0xfd, 0xe4};
	memset(bogus + 5, 0xff, 8); /* frame content size: 2^64 - 1 */
	write_file(mp, bogus, sizeof(bogus));
	cm_error_clear(&err);
	CHECK(sn_snapshot_read(plain, "zs", &rm, &e2, &err) == CM_ECORRUPT);
	uint8_t cut[6] = {0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x10};
	write_file(mp, cut, sizeof(cut));
	cm_error_clear(&err);
	CHECK(sn_snapshot_read(plain, "zs", &rm, &e2, &err) == CM_ECORRUPT);

	/* a flipped byte, then a cut frame */
	char *zb;
	size_t zl;
	REQUIRE(cm_file_read(bp, 1 << 20, &zb, &zl) == CM_OK);
	zb[zl / 2] ^= 0x55;
	write_file(bp, zb, zl);
	cm_error_clear(&err);
	CHECK(sn_blob_check(plain, &a, "seg-z.mdb", &err) == CM_ECORRUPT &&
	      strstr(err.reason, "seg-z.mdb"));
	cm_error_clear(&err);
	CHECK(sn_blob_get(plain, &a, "seg-z.mdb", out, &err) == CM_ECORRUPT);
	CHECK(access(out, F_OK) != 0);
	zb[zl / 2] ^= 0x55;
	write_file(bp, zb, zl / 2);
	cm_error_clear(&err);
	CHECK(sn_blob_check(plain, &a, "seg-z.mdb", &err) == CM_ECORRUPT &&
	      strstr(err.reason, "truncated"));
	cm_free(CM_MEM_COMMON, zb);

	/* delete collects the .zst blob */
	uint64_t nb = 0, by = 0;
	utimensat(AT_FDCWD, bp, (struct timespec[2]){{0, 0}, {0, 0}}, 0);
	CHECK(sn_snapshot_delete(plain, "zs", &nb, &by, &err) == CM_OK);
	CHECK(access(bp, F_OK) != 0);
	free(data);
	sn_repo_close(z);
	sn_repo_close(plain);
}

int
main(void)
{
	snprintf(root, sizeof(root), "/tmp/sn_test-%d", (int)getpid());
	cm_rm_rf(root);
	REQUIRE(cm_mkdir_p(root) == CM_OK);
	test_locations();
	test_blobs_and_catalogue();
	test_compressed();
	test_throttle();
	test_wire();
	test_concurrent();
	cm_rm_rf(root);
	return check_report("sn_test");
}
