/* Regexp determinization limits (search/multiterm.c): patterns under the
 * state cap that used to take seconds or minutes to determinize are now
 * refused within the work budget, as a 400 too_complex_to_determinize_
 * exception, both from the automaton builder and through a shard search;
 * patterns that need real work but fit still compile and match. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "common/cm_sys.h"
#include "search/exec.h"
#include "search/sr.h"
#include "storage/st_shard.h"

/* CPU seconds: the machine is shared, wall time says little. */
static double
cpu_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Compiles re and returns the CPU seconds it took; *rc and err say how. */
static double
compile(const char *re, int max_states, cm_err *rc, cm_error *err)
{
	sr_dfa *d = NULL;
	cm_error_clear(err);
	double t0 = cpu_now();
	*rc = sr_dfa_regexp(re, false, max_states, &d, err);
	double t = cpu_now() - t0;
	sr_dfa_free(d);
	return t;
}

static void
check_refused(const char *re, int max_states, double max_cpu)
{
	cm_error err;
	cm_err rc;
	double t = compile(re, max_states, &rc, &err);
	printf("  %-44.44s %7.3f s CPU: %s\n", strlen(re) < 100 ? re : "(see above)", t,
	       rc ? err.reason : "compiled");
	CHECKF(rc == CM_ELIMIT, "%.60s: rc %d", re, rc);
	CHECKF(cm_err_status(rc) == 400, "%.60s", re);
	CHECKF(strcmp(cm_error_type(&err), "too_complex_to_determinize_exception") == 0,
	       "%.60s: %s", re, cm_error_type(&err));
	CHECKF(t < max_cpu, "%.60s took %.3f s CPU", re, t);
}

static void
test_refused_fast(void)
{
	/* 18.6 s of CPU before the work budget (the NFA is under its cap, and
	 * the DFA reaches 10000 states only after all that); ~0.3 s now */
	check_refused(".{0,1000}(.{0,1000}){0,30}", 10000, 2.0);
	/* a higher state limit does not lift the work budget */
	check_refused(".{0,1000}(.{0,1000}){0,30}", 1000000, 2.0);
	check_refused("(.{0,1000}){0,90}", 10000, 2.0); /* was 69 s of CPU */
	check_refused("(a|b|c|d|e|f|g|h|i|j|k|l|m|n|o|p){0,1000}", 10000, 2.0);
	/* the state cap still answers first where it is reached first */
	check_refused("[ab]*a[ab]{20}", 10000, 2.0);
	cm_error err;
	cm_err rc;
	compile("[ab]*a[ab]{20}", 10000, &rc, &err);
	CHECKF(strstr(err.reason, "more than 10000 states") != NULL, "%s", err.reason);

	/* ~960 single code points (1920 alphabet classes) then a long cheap
	 * tail: a transition table of 3000 states x 1924 classes (23 MB) is
	 * past the table's budget (16 MB) */
	char *re = malloc(8192);
	size_t n = 0;
	re[n++] = '[';
	for (uint32_t cp = 0x80; cp < 0x800; cp += 2) {
		re[n++] = (char)(0xC0 | (cp >> 6));
		re[n++] = (char)(0x80 | (cp & 0x3F));
	}
	memcpy(re + n, "]x{0,1000}y{0,1000}z{0,1000}", sizeof("]x{0,1000}y{0,1000}z{0,1000}"));
	printf("  (the next pattern: [960 code points]x{0,1000}y{0,1000}z{0,1000})\n");
	check_refused(re, 10000, 2.0);
	free(re);
}

static void
test_big_but_fine(void)
{
	/* 3001 states over a small alphabet: real work (~21M units), allowed */
	sr_dfa *d = NULL;
	cm_error err;
	cm_error_clear(&err);
	double t0 = cpu_now();
	cm_err rc = sr_dfa_regexp(".{0,1000}.{0,1000}.{0,1000}", false, 10000, &d, &err);
	printf("  %-44.44s %7.3f s CPU: %s\n", ".{0,1000}.{0,1000}.{0,1000}", cpu_now() - t0,
	       rc ? err.reason : "compiled");
	REQUIRE(rc == CM_OK);
	char *s = malloc(3002);
	memset(s, 'x', 3001);
	CHECK(sr_dfa_match(d, (const uint8_t *)s, 3000));
	CHECK(!sr_dfa_match(d, (const uint8_t *)s, 3001));
	free(s);
	sr_dfa_free(d);
	/* the everyday ones */
	const char *ok[] = {"[ab]*a[ab]{12}", "[a-z]{0,100}@[a-z]{0,100}\\.com", ".*foo.*bar.*",
	                    "(quick|lazy|brown)[0-9]{1,4}"};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		cm_err r;
		double t = compile(ok[i], 10000, &r, &err);
		CHECKF(r == CM_OK, "%s: %s", ok[i], err.reason);
		CHECKF(t < 1.0, "%s took %.3f s CPU", ok[i], t);
	}
}

/* Through a shard search: the error reaches the request as the 400. */
static void
test_search(void)
{
	char dir[] = "/tmp/multiterm_testXXXXXX";
	REQUIRE(mkdtemp(dir));
	cJSON *mj = cJSON_Parse("{\"properties\":{\"k\":{\"type\":\"keyword\"}}}");
	st_mapping *m = NULL;
	cm_error err;
	cm_error_clear(&err);
	REQUIRE(st_mapping_from_json(mj, &m, &err) == CM_OK);
	cJSON_Delete(mj);
	st_shard_opts o;
	st_shard_opts_default(&o);
	o.background_merges = false;
	st_shard *sh = NULL;
	REQUIRE(st_shard_open(dir, m, &o, &sh, &err) == CM_OK);
	st_mapping_unref(m);
	st_op ops[50];
	st_op_result res[50];
	char ids[50][8], src[50][48];
	for (int i = 0; i < 50; i++) {
		snprintf(ids[i], sizeof(ids[i]), "%d", i);
		snprintf(src[i], sizeof(src[i]), "{\"k\":\"%s%d\"}", i % 2 ? "ab" : "xyz", i);
		memset(&ops[i], 0, sizeof(ops[i]));
		ops[i].type = ST_OP_INDEX;
		ops[i].id = ids[i];
		ops[i].id_len = strlen(ids[i]);
		ops[i].source = src[i];
		ops[i].source_len = strlen(src[i]);
		ops[i].seq_no = ST_NO_SEQ;
		ops[i].if_seq_no = ST_NO_SEQ;
	}
	REQUIRE(st_shard_apply(sh, ops, 50, res) == CM_OK);
	REQUIRE(st_shard_refresh(sh) == CM_OK);
	st_reader *r = st_shard_reader(sh);
	const char *bodies[] = {
	    "{\"query\":{\"regexp\":{\"k\":\"ab[0-9]+\"}}}",
	    "{\"query\":{\"regexp\":{\"k\":{\"value\":\".{0,1000}(.{0,1000}){0,30}\","
	    "\"max_determinized_states\":100000}}}}",
	};
	for (int b = 0; b < 2; b++) {
		cJSON *j = cJSON_Parse(bodies[b]);
		sr_request req;
		sr_request_init(&req);
		cm_error_clear(&err);
		REQUIRE(sr_request_from_json(j, &req, &err) == CM_OK);
		cJSON_Delete(j);
		sr_shard_result out;
		memset(&out, 0, sizeof(out));
		double t0 = cpu_now();
		cm_err rc = sr_search_shard(r, 0, &req, &out, &err);
		double t = cpu_now() - t0;
		if (b == 0) {
			CHECKF(rc == CM_OK && out.total == 25, "rc %d total %llu: %s", rc,
			       (unsigned long long)out.total, err.reason);
		} else {
			printf("  search with the hostile regexp: %.3f s CPU: %s (%s)\n", t,
			       err.reason, cm_error_type(&err));
			CHECK(rc != CM_OK && cm_err_status(rc) == 400);
			CHECK(strcmp(cm_error_type(&err), "too_complex_to_determinize_exception") ==
			      0);
			CHECKF(t < 2.0, "%.3f s CPU", t);
		}
		sr_shard_result_free(&out);
		sr_request_free(&req);
	}
	st_reader_release(r);
	st_shard_close(sh);
	cm_rm_rf(dir);
}

/* ---- the dictionary walk against brute force ---- */

static int
bytes_cmp(const void *a, const void *b)
{
	const char *x = *(const char *const *)a, *y = *(const char *const *)b;
	return strcmp(x, y);
}

/* A sorted "dictionary" and the walk over it with next/seek as exec.c
 * does; every term the walk takes must be a match and every match taken. */
static void
walk_check(const char *pat, bool regexp, char **terms, size_t nt, size_t *seeks)
{
	cm_error err = {0};
	sr_dfa *d = NULL;
	cm_err rc = regexp ? sr_dfa_regexp(pat, false, 0, &d, &err) : sr_dfa_wildcard(pat, false, &d, &err);
	CHECKF(rc == CM_OK, "%s: %s", pat, err.reason);
	if (rc)
		return;
	bool *took = calloc(nt, sizeof(bool));
	sr_dfa_walk w;
	sr_dfa_walk_init(&w, d);
	uint8_t target[SR_WALK_SEEK_MAX];
	size_t tlen, plen, slen;
	const char *pre = sr_dfa_prefix(d, &plen), *suf = sr_dfa_suffix(d, &slen);
	size_t i = 0;
	while (i < nt) {
		size_t n = strlen(terms[i]);
		/* exec.c's drop by the literal suffix, before the walk */
		if (suf && n >= plen && memcmp(terms[i], pre, plen) == 0 &&
		    (n < plen + slen || memcmp(terms[i] + n - slen, suf, slen) != 0)) {
			i++;
			continue;
		}
		sr_walk_verdict v = sr_dfa_walk_term(&w, (const uint8_t *)terms[i], strlen(terms[i]), target, &tlen);
		if (v == SR_WALK_END)
			break;
		if (v == SR_WALK_MATCH)
			took[i] = true;
		if (v != SR_WALK_SEEK) {
			i++;
			continue;
		}
		/* next, then seek if still below the target */
		if (++i >= nt)
			break;
		char key[SR_WALK_SEEK_MAX + 1];
		memcpy(key, target, tlen);
		key[tlen] = 0;
		if (strcmp(terms[i], key) < 0) {
			(*seeks)++;
			while (i < nt && strcmp(terms[i], key) < 0)
				i++;
		}
	}
	for (size_t k = 0; k < nt; k++) {
		bool m = sr_dfa_match(d, (const uint8_t *)terms[k], strlen(terms[k]));
		CHECKF(m == took[k], "%s on [%s]: match %d, walk took %d", pat, terms[k], m, took[k]);
	}
	free(took);
	sr_dfa_free(d);
}

static void
test_walk(void)
{
	/* terms over a small alphabet, non-ASCII and invalid UTF-8 included */
	static const char *alpha[] = {"a", "b", "c", "d", "e", "z", "\xc3\xa9", "\xe2\x82\xac", "\xbf", "\xc3"};
	srand(7);
	size_t nt = 4000;
	char **terms = malloc(nt * sizeof *terms);
	for (size_t k = 0; k < nt; k++) {
		char buf[64] = "";
		int len = rand() % 7;
		for (int j = 0; j < len; j++)
			strcat(buf, alpha[rand() % (rand() % 4 ? 6 : 10)]);
		terms[k] = strdup(buf);
	}
	qsort(terms, nt, sizeof *terms, bytes_cmp);
	size_t u = 0;
	for (size_t k = 0; k < nt; k++)
		if (!u || strcmp(terms[k], terms[u - 1]))
			terms[u++] = terms[k];
		else
			free(terms[k]);
	nt = u;
	static const char *wild[] = {"a*", "*", "?", "a?c*", "*e", "b*d?e", "c\xc3\xa9*", "*\xe2\x82\xac*", "??", "d*a*z", "ab", "",
	                             "b*e", "a*\xc3\xa9", "a*b*c", "ab*ba", "a\\*b*z", "e*e"};
	static const char *re[] = {"a[b-d]e.*", "(ab|cd)*", "[^a]z.*", "a.{2}", "(a|\xc3\xa9)+e?", "z*", "[c-e]+[ab]", ".*ba.*", "e{2,3}d"};
	/* the literal tail, only behind a first wildcard '*' */
	static const struct {
		const char *pat, *suffix;
	} tails[] = {{"sh*ing", "ing"}, {"coo?ery", NULL}, {"a*b?c", "c"},     {"ab*", NULL},
	             {"ab", NULL},      {"a\\*b*cd", "cd"}, {"*\xc3\xa9", "\xc3\xa9"}, {"a*\\?", "?"}};
	for (size_t k = 0; k < sizeof tails / sizeof *tails; k++) {
		cm_error err = {0};
		sr_dfa *d = NULL;
		REQUIRE(sr_dfa_wildcard(tails[k].pat, false, &d, &err) == CM_OK);
		size_t n;
		const char *got = sr_dfa_suffix(d, &n);
		CHECKF(tails[k].suffix ? got && n == strlen(tails[k].suffix) &&
		                             !memcmp(got, tails[k].suffix, n)
		                       : !got,
		       "suffix of %s: %.*s", tails[k].pat, got ? (int)n : 4, got ? got : "none");
		sr_dfa_free(d);
		REQUIRE(sr_dfa_wildcard(tails[k].pat, true, &d, &err) == CM_OK);
		CHECKF(!sr_dfa_suffix(d, &n), "no suffix when case-insensitive: %s", tails[k].pat);
		sr_dfa_free(d);
	}
	size_t seeks = 0;
	for (size_t k = 0; k < sizeof wild / sizeof *wild; k++)
		walk_check(wild[k], false, terms, nt, &seeks);
	for (size_t k = 0; k < sizeof re / sizeof *re; k++)
		walk_check(re[k], true, terms, nt, &seeks);
	printf("  dictionary walk: %zu terms, %zu seeks over %zu patterns\n", nt, seeks,
	       sizeof wild / sizeof *wild + sizeof re / sizeof *re);
	CHECK(seeks > 0);
	for (size_t k = 0; k < nt; k++)
		free(terms[k]);
	free(terms);
}

int
main(void)
{
	test_refused_fast();
	test_big_but_fine();
	test_search();
	test_walk();
	return check_report("multiterm_test");
}
