/* The highlighter's fragmenting: passages on sentence boundaries, cut
 * past fragment_size at a word boundary, top passages by Lucene's
 * passage score in text order, tags around each span, the html encoder;
 * and the request options it parses. */
#include <cjson/cJSON.h>
#include <string.h>

#include "../common/cm_sys.h"
#include "../tests/support/check.h"
#include "highlight.h"

static char got[4096];

/* Fragments of text for the spans of every occurrence of each word in
 * words (NULL-terminated), as the JSON array body they render to. */
static const char *
frags(const char *text, const char *const *words, int fsize, int nfrags, bool by_score, bool html)
{
	sr_hl_span spans[64];
	size_t n = 0, len = strlen(text);
	for (size_t i = 0; i < len && n < 64; i++) {
		for (const char *const *w = words; *w; w++) {
			size_t wl = strlen(*w);
			if (i + wl > len)
				continue;
			bool left =
			    i == 0 || !((text[i - 1] | 32) >= 'a' && (text[i - 1] | 32) <= 'z');
			bool right = i + wl == len ||
			             !((text[i + wl] | 32) >= 'a' && (text[i + wl] | 32) <= 'z');
			if (left && right && !strncmp(text + i, *w, wl)) {
				spans[n++] = (sr_hl_span){(uint32_t)i, (uint32_t)(i + wl),
				                          (uint32_t)(w - words)};
				break;
			}
		}
	}
	cm_buf b;
	cm_buf_init(&b, CM_MEM_SEARCH);
	sr_highlight_fragments(text, len, spans, n, fsize, nfrags, by_score, "<em>", "</em>", html,
	                       &b);
	snprintf(got, sizeof got, "%.*s", (int)b.len, (const char *)b.data);
	cm_buf_free(&b);
	return got;
}

#define FRAGS_ARE(want, ...)                                                                       \
	do {                                                                                       \
		const char *g_ = frags(__VA_ARGS__);                                               \
		CHECKF(!strcmp(g_, want), "got %s\n   want %s", g_, want);                         \
	} while (0)

static void
test_sentences(void)
{
	const char *t = "One fox here. Two dogs there! Three foxes? Four fox.";
	const char *fox[] = {"fox", NULL};
	FRAGS_ARE("\"One <em>fox</em> here.\",\"Four <em>fox</em>.\"", t, fox, 100, 5, false,
	          false);
	/* the best passage first: the short one wins Lucene's length norm */
	FRAGS_ARE("\"Four <em>fox</em>.\"", t, fox, 100, 1, false, false);
	FRAGS_ARE("\"Four <em>fox</em>.\",\"One <em>fox</em> here.\"", t, fox, 100, 2, true, false);
	/* a rare term outweighs a frequent one (Lucene's passage term weights):
	 * one "fox" and the only "cat" beat three "fox" */
	const char *fc[] = {"fox", "cat", NULL};
	FRAGS_ARE("\"Then <em>fox</em> <em>cat</em>.\"", "fox fox fox dog. Then fox cat.", fc, 100,
	          1, false, false);
	/* 0 fragments: the whole text */
	FRAGS_ARE("\"One <em>fox</em> here. Two dogs there! Three foxes? Four <em>fox</em>.\"", t,
	          fox, 100, 0, false, false);
	/* a newline ends a sentence too; a dot inside a word does not */
	const char *u = "see e.g. fox.js\nnext fox line";
	FRAGS_ARE("\"see e.g. <em>fox</em>.js\",\"next <em>fox</em> line\"", u, fox, 100, 5, false,
	          false);
	const char *none[] = {"cat", NULL};
	FRAGS_ARE("", t, none, 100, 5, false, false);
}

static void
test_bounds(void)
{
	const char *t = "alpha beta gamma delta epsilon zeta eta theta iota kappa";
	const char *w1[] = {"beta", NULL};
	/* past fragment_size, the passage ends at the next word boundary */
	FRAGS_ARE("\"alpha <em>beta</em> gamma\"", t, w1, 12, 5, false, false);
	const char *w2[] = {"theta", NULL};
	/* a match further than fragment_size into its sentence starts at its word */
	FRAGS_ARE("\"<em>theta</em> iota kappa\"", t, w2, 12, 5, false, false);
	/* two matches in reach share one passage; one past it starts another */
	const char *w3[] = {"beta", "gamma", NULL};
	FRAGS_ARE("\"alpha <em>beta</em> <em>gamma</em>\"", t, w3, 12, 5, false, false);
	const char *w4[] = {"gamma", "delta", NULL};
	FRAGS_ARE("\"alpha beta <em>gamma</em>\",\"<em>delta</em> epsilon\"", t, w4, 12, 5, false,
	          false);
	/* fragment_size counts characters, not bytes: 12 two-byte letters fit */
	const char *g = "\xce\xb1\xce\xb2\xce\xb3\xce\xb4\xce\xb5 fox \xce\xb6\xce\xb7 "
	                "\xce\xb8\xce\xb9\xce\xba\xce\xbb";
	FRAGS_ARE("\"\xce\xb1\xce\xb2\xce\xb3\xce\xb4\xce\xb5 <em>fox</em> \xce\xb6\xce\xb7\"", g,
	          (const char *[]){"fox", NULL}, 12, 5, false, false);
	/* html encoder escapes the text, not the tags */
	const char *h = "a <b> & fox";
	FRAGS_ARE("\"a &lt;b&gt; &amp; <em>fox</em>\"", h, (const char *[]){"fox", NULL}, 100, 5,
	          false, true);
	/* quotes and control characters come out as JSON escapes */
	FRAGS_ARE("\"say \\\"<em>fox</em>\\\"\\n<em>fox</em>\"", "say \"fox\"\nfox",
	          (const char *[]){"fox", NULL}, 100, 0, false, false);
}

static cm_err
parse(const char *json, cm_error *err)
{
	cJSON *j = cJSON_Parse(json);
	sr_highlight *h = NULL;
	cm_error_clear(err);
	cm_err rc = sr_highlight_parse(j, &h, err);
	sr_highlight_free(h);
	cJSON_Delete(j);
	return rc;
}

static void
test_parse(void)
{
	cm_error err;
	CHECK(parse("{\"fields\":{\"a\":{},\"b*\":{\"number_of_fragments\":0}}}", &err) == CM_OK);
	CHECK(
	    parse("{\"fields\":[{\"a\":{}}],\"pre_tags\":[\"<x>\",\"<y>\"],\"post_tags\":\"</x>\","
	          "\"order\":\"score\",\"encoder\":\"html\",\"type\":\"fvh\","
	          "\"boundary_scanner\":\"sentence\",\"fragmenter\":\"span\","
	          "\"highlight_query\":{\"match\":{\"a\":\"x\"}}}",
	          &err) == CM_OK);
	CHECK(parse("{}", &err) == CM_EPARSE && strstr(err.reason, "requires [fields]"));
	CHECK(parse("{\"fields\":{\"a\":{}},\"x\":1}", &err) == CM_EPARSE &&
	      strstr(err.reason, "unknown field [x]"));
	CHECK(parse("{\"fields\":{\"a\":{\"fields\":{}}}}", &err) == CM_EPARSE);
	CHECK(parse("{\"fields\":{\"a\":{\"type\":\"postings\"}}}", &err) == CM_EINVAL &&
	      strstr(err.reason, "unknown highlighter type [postings] for the field [a]"));
	CHECK(parse("{\"fields\":{\"a\":{\"fragment_size\":-1}}}", &err) == CM_EINVAL);
	CHECK(parse("{\"fields\":{\"a\":{\"fragment_size\":1.5}}}", &err) == CM_EPARSE);
	CHECK(parse("{\"fields\":{\"a\":{\"pre_tags\":[]}}}", &err) == CM_EPARSE);
	CHECK(parse("{\"fields\":{\"a\":{\"require_field_match\":\"yes\"}}}", &err) == CM_EPARSE);
	CHECK(parse("{\"fields\":{\"a\":{\"highlight_query\":{\"nope\":{}}}}}", &err) != CM_OK);
	CHECK(parse("{\"fields\":[{\"a\":{},\"b\":{}}]}", &err) == CM_EPARSE);
	CHECK(parse("{\"fields\":7}", &err) == CM_EPARSE);
	CHECK(parse("[]", &err) == CM_EPARSE);
}

/* The whole path on a mapping and a query: and a 1 MiB value full of
 * matches stays fast (every scan is bounded). */
static char *
render(const char *mapping, const char *query, const char *hl, const char *src)
{
	cJSON *mj = cJSON_Parse(mapping), *qj = cJSON_Parse(query), *hj = cJSON_Parse(hl);
	st_mapping *m = NULL;
	sr_query *q = NULL;
	sr_highlight *h = NULL;
	cm_error err;
	cm_error_clear(&err);
	REQUIRE(st_mapping_from_json(mj, &m, &err) == CM_OK);
	REQUIRE(sr_query_from_json(qj, &q, &err) == CM_OK);
	REQUIRE(sr_highlight_parse(hj, &h, &err) == CM_OK);
	cm_buf b;
	cm_buf_init(&b, CM_MEM_SEARCH);
	REQUIRE(sr_highlight_render(h, m, q, src, strlen(src), &b, &err) == CM_OK);
	char *out = strndup((const char *)b.data, b.len);
	cm_buf_free(&b);
	sr_highlight_free(h);
	sr_query_free(q);
	st_mapping_unref(m);
	cJSON_Delete(mj);
	cJSON_Delete(qj);
	cJSON_Delete(hj);
	return out;
}

static void
test_render(void)
{
	const char *map = "{\"properties\":{\"t\":{\"type\":\"text\"},\"k\":{\"type\":\"keyword\"},"
	                  "\"n\":{\"type\":\"long\"}}}";
	char *o = render(map, "{\"match_phrase\":{\"t\":\"brown fox\"}}", "{\"fields\":{\"*\":{}}}",
	                 "{\"t\":\"a brown dog, a brown fox\",\"k\":\"fox\",\"n\":5}");
	CHECKF(!strcmp(o, "{\"t\":[\"a brown dog, a <em>brown</em> <em>fox</em>\"]}"), "%s", o);
	free(o);
	o = render(map, "{\"term\":{\"k\":\"fox\"}}", "{\"fields\":{\"k\":{},\"n\":{}}}",
	           "{\"t\":\"fox\",\"k\":[\"dog\",\"fox\"],\"n\":5}");
	CHECKF(!strcmp(o, "{\"k\":[\"<em>fox</em>\"]}"), "%s", o);
	free(o);
	o = render(map, "{\"match\":{\"t\":\"cat\"}}", "{\"fields\":{\"t\":{}}}",
	           "{\"t\":\"a brown dog\"}");
	CHECKF(!strcmp(o, ""), "no fragment, no object: %s", o);
	free(o);

	size_t n = 1u << 20;
	char *big = malloc(n + 16);
	size_t k = strlen(strcpy(big, "{\"t\":\""));
	while (k < n) {
		memcpy(big + k, k % 3 ? "brown fox " : "xxxxxxxxx ", 10);
		k += 10;
	}
	strcpy(big + k, "\"}");
	uint64_t t0 = cm_now_ns();
	o = render(map, "{\"match_phrase\":{\"t\":{\"query\":\"brown fox\",\"slop\":2}}}",
	           "{\"fields\":{\"t\":{\"number_of_fragments\":3,\"fragment_size\":50}}}", big);
	double secs = (double)(cm_now_ns() - t0) / 1e9;
	CHECKF(secs < 20, "1 MiB value took %.1f s", secs);
	CHECKF(strstr(o, "<em>brown</em> <em>fox</em>") != NULL, "%.200s", o);
	free(o);
	t0 = cm_now_ns();
	o = render(map, "{\"match_phrase\":{\"t\":{\"query\":\"fox brown\",\"slop\":1000000}}}",
	           "{\"fields\":{\"t\":{}}}", big);
	secs = (double)(cm_now_ns() - t0) / 1e9;
	CHECKF(secs < 20, "a huge slop took %.1f s", secs);
	CHECK(strstr(o, "<em>fox</em>") != NULL);
	free(o);
	free(big);
}

int
main(void)
{
	test_render();
	test_sentences();
	test_bounds();
	test_parse();
	return check_report("highlight_test");
}
