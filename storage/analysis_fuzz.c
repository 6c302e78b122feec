/* libFuzzer target: custom analysis. The first input byte picks the
 * target: 0 parses the rest as index settings "analysis" and runs every
 * analyzer and normalizer it defines over a fixed text; otherwise the rest
 * is text for every analyzer of a settings object using every component.
 * Build:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I. storage/analysis_fuzz.c \
 *     storage/{types,analysis,an_chain,an_components,an_settings}.c \
 *     common/cm_alloc.c common/cm_err.c common/cm_buf.c \
 *     -lcjson -lutf8proc -lstemmer -lxxhash -o analysis_fuzz */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/cm_buf.h"
#include "storage/st_types.h"

typedef struct {
	size_t len, sum;
	uint32_t last;
	int n;
} seen;

static int
on_tok(void *ctx, const st_token *t)
{
	seen *s = ctx;
	/* touch the term so ASan sees out-of-bounds reads */
	for (size_t i = 0; i < t->len; i++)
		s->sum += (unsigned char)t->term[i];
	if (t->start > t->end || t->end > s->len || (s->n > 0 && t->position < s->last))
		abort();
	s->last = t->position;
	s->n++;
	return 0;
}

static const char *every =
    "{\"char_filter\":{\"h\":{\"type\":\"html_strip\",\"escaped_tags\":[\"b\"]},"
    "\"m\":{\"type\":\"mapping\",\"mappings\":[\"ph => f\",\"\\\\u00e9 => e\",\"x => \"]},"
    "\"p\":{\"type\":\"pattern_replace\",\"pattern\":\"([0-9])-\",\"replacement\":\"$1\"}},"
    "\"tokenizer\":{\"ng\":{\"type\":\"ngram\",\"min_gram\":1,\"max_gram\":2,"
    "\"token_chars\":[\"letter\",\"digit\"]},\"pt\":{\"type\":\"pattern\",\"pattern\":\"(a|b)*\","
    "\"group\":1},\"cg\":{\"type\":\"char_group\",\"tokenize_on_chars\":[\"-\",\"whitespace\"]},"
    "\"ph\":{\"type\":\"path_hierarchy\",\"skip\":1}},"
    "\"filter\":{\"syn\":{\"type\":\"synonym_graph\",\"synonyms\":[\"foo, foo bar\",\"a b => c\"]},"
    "\"wd\":{\"type\":\"word_delimiter_graph\",\"catenate_all\":true,\"preserve_original\":true},"
    "\"sh\":{\"type\":\"shingle\",\"max_shingle_size\":3},\"en\":{\"type\":\"edge_ngram\","
    "\"max_gram\":3,\"preserve_original\":true},\"u\":{\"type\":\"unique\","
    "\"only_on_same_position\":true},\"st\":{\"type\":\"stemmer\",\"language\":\"german\"}},"
    "\"analyzer\":{\"a1\":{\"char_filter\":[\"h\",\"m\",\"p\"],\"tokenizer\":\"standard\","
    "\"filter\":[\"lowercase\",\"asciifolding\",\"stop\",\"syn\",\"wd\",\"porter_stem\",\"sh\","
    "\"u\",\"reverse\",\"truncate\",\"fingerprint\"]},\"a2\":{\"tokenizer\":\"ng\",\"filter\":"
    "[\"uppercase\",\"en\",\"remove_duplicates\"]},\"a3\":{\"tokenizer\":\"pt\",\"filter\":"
    "[\"decimal_digit\",\"elision\",\"apostrophe\",\"st\"]},\"a4\":{\"tokenizer\":\"cg\","
    "\"filter\":[\"trim\",{\"type\":\"length\",\"min\":2}]},\"a5\":{\"tokenizer\":\"ph\"},"
    "\"a6\":{\"type\":\"pattern\",\"stopwords\":[\"x\"]}},"
    "\"normalizer\":{\"n\":{\"char_filter\":[\"m\"],\"filter\":[\"lowercase\",\"asciifolding\"]}}}";

static void
run_all(const st_analysis *a, const cJSON *json, const char *text, size_t n)
{
	const cJSON *sec, *it;
	sec = cJSON_GetObjectItemCaseSensitive(json, "analyzer");
	cJSON_ArrayForEach(it, sec)
	{
		const st_analyzer *an = st_analysis_analyzer(a, it->string);
		seen s = {.len = n};
		if (an)
			st_analyzer_run(an, text, n, 0, on_tok, &s, NULL);
	}
	sec = cJSON_GetObjectItemCaseSensitive(json, "normalizer");
	cJSON_ArrayForEach(it, sec)
	{
		const st_analyzer *an = st_analysis_normalizer(a, it->string);
		cm_buf b;
		cm_buf_init(&b, CM_MEM_STORAGE);
		if (an)
			st_normalize(an, text, n, &b);
		cm_buf_free(&b);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *rest = (const char *)data + 1;
	size_t n = size - 1;
	cm_error err = {0};
	st_analysis *a = NULL;
	if (data[0] == 0) {
		cJSON *j = cJSON_ParseWithLength(rest, n);
		if (j && st_analysis_parse(j, 2, 3, &a, &err) == CM_OK) {
			static const char text[] =
			    "The <b>QUICK</b> brown-fox's 12-34 jumps &amp; ph\xc3\xa9";
			run_all(a, j, text, sizeof(text) - 1);
		}
		st_analysis_unref(a);
		cJSON_Delete(j);
		return 0;
	}
	static cJSON *ej;
	static st_analysis *ea;
	if (ej == NULL) {
		ej = cJSON_Parse(every);
		if (st_analysis_parse(ej, 2, 3, &ea, &err) != CM_OK)
			abort(); /* the fixed settings must parse */
	}
	run_all(ea, ej, rest, n);
	return 0;
}
