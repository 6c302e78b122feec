/* Analyzer tests: every analyzer, Unicode segmentation, positions with
 * stop-word gaps, stemming, long tokens, invalid UTF-8. */
#include "storage/st_types.h"

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "common/cm_alloc.h"
#include "common/cm_buf.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

typedef struct {
	char out[8192];
	size_t n;
	int count;
	int stop_after;
	st_token last;
	size_t maxlen;
} collect;

static int
collect_fn(void *ctx, const st_token *t)
{
	collect *c = ctx;
	int w = snprintf(c->out + c->n, sizeof(c->out) - c->n, "%s%.*s", c->count ? " " : "",
	                 (int)t->len, t->term);
	if (w > 0 && (size_t)w < sizeof(c->out) - c->n)
		c->n += (size_t)w;
	c->count++;
	c->last = *t;
	if (t->len > c->maxlen)
		c->maxlen = t->len;
	return c->stop_after && c->count >= c->stop_after;
}

/* Tokens joined by spaces. */
static const char *
run(st_analyzer_kind a, const char *text, collect *c)
{
	memset(c, 0, sizeof(*c));
	cm_err e = st_analyze(a, text, strlen(text), 0, collect_fn, c, NULL);
	CHECK(e == CM_OK);
	return c->out;
}

#define EXPECT(a, text, want)                                                                      \
	do {                                                                                       \
		collect c_;                                                                        \
		const char *got_ = run(a, text, &c_);                                              \
		CHECKF(strcmp(got_, want) == 0, "%s(%s): got [%s] want [%s]", st_analyzer_name(a), \
		       text, got_, want);                                                          \
	} while (0)

typedef struct {
	uint32_t pos[64];
	uint32_t start[64], end[64];
	int n;
} positions;

static int
pos_fn(void *ctx, const st_token *t)
{
	positions *p = ctx;
	if (p->n < 64) {
		p->pos[p->n] = t->position;
		p->start[p->n] = t->start;
		p->end[p->n] = t->end;
		p->n++;
	}
	return 0;
}

static int
count_fn(void *ctx, const st_token *t)
{
	(*(size_t *)ctx)++;
	return 0;
}

static void
test_names(void)
{
	st_field_type t;
	st_analyzer_kind a;
	CHECK(st_field_type_from_name("keyword", &t) && t == ST_FT_KEYWORD);
	CHECK(st_field_type_from_name("object", &t) && t == ST_FT_OBJECT);
	CHECK(!st_field_type_from_name("strng", &t));
	CHECK(strcmp(st_field_type_name(ST_FT_DATE), "date") == 0);
	CHECK(st_field_type_is_numeric(ST_FT_BOOLEAN) && st_field_type_is_numeric(ST_FT_DATE));
	CHECK(!st_field_type_is_numeric(ST_FT_TEXT) && !st_field_type_is_numeric(ST_FT_KEYWORD));
	CHECK(st_analyzer_from_name("english", &a) && a == ST_AN_ENGLISH);
	CHECK(!st_analyzer_from_name("french", &a));
	CHECK(strcmp(st_analyzer_name(ST_AN_WHITESPACE), "whitespace") == 0);
}

static void
test_standard(void)
{
	EXPECT(ST_AN_STANDARD, "The Quick brown-fox, jumped!", "the quick brown fox jumped");
	EXPECT(ST_AN_STANDARD, "Café Ñandú", "café ñandú");
	/* decomposed input composes (NFC) after folding */
	EXPECT(ST_AN_STANDARD, "Cafe\xCC\x81", "caf\xC3\xA9");
	EXPECT(ST_AN_STANDARD, "中文字", "中 文 字");
	EXPECT(ST_AN_STANDARD, "abc中文def", "abc 中 文 def");
	EXPECT(ST_AN_STANDARD, "ひらがな", "ひ ら が な");
	EXPECT(ST_AN_STANDARD, "カタカナ", "カタカナ"); /* katakana runs join (UAX#29 WB13) */
	EXPECT(ST_AN_STANDARD, "한국어 텍스트", "한국어 텍스트");
	EXPECT(ST_AN_STANDARD, "abc123 4.5", "abc123 4.5");
	EXPECT(ST_AN_STANDARD, "1,000.50 end.", "1,000.50 end");
	EXPECT(ST_AN_STANDARD, "O'Neil's don't", "o'neil's don't");
	EXPECT(ST_AN_STANDARD, "'quoted' rock'n'roll'", "quoted rock'n'roll");
	EXPECT(ST_AN_STANDARD, "I \xF0\x9F\x98\x80 emoji \xE2\x9D\xA4\xEF\xB8\x8F!", "i emoji");
	EXPECT(ST_AN_STANDARD, "foo_bar __ x", "foo_bar x");
	EXPECT(ST_AN_STANDARD, "wi-fi e-mail", "wi fi e mail");
	EXPECT(ST_AN_STANDARD, "ΣΊΣΥΦΟΣ", "σίσυφοσ"); /* full case folding */
	EXPECT(ST_AN_STANDARD, "", "");
	EXPECT(ST_AN_STANDARD, "  ... !!! ", "");
	EXPECT(ST_AN_STANDARD, "Ünïcödé\tTAB\nnewline", "ünïcödé tab newline");
	EXPECT(ST_AN_STANDARD, "x\xE2\x80\x99y", "x\xE2\x80\x99y"); /* ’ is MidNumLet */
	EXPECT(ST_AN_STANDARD, "٣٤٥ العربية", "٣٤٥ العربية");
}

static void
test_other_analyzers(void)
{
	EXPECT(ST_AN_SIMPLE, "Hello World42x foo_bar O'Neil", "hello world x foo bar o neil");
	EXPECT(ST_AN_SIMPLE, "Café", "café");
	EXPECT(ST_AN_WHITESPACE, "Hello  World!\tfoo\n", "Hello World! foo");
	EXPECT(ST_AN_WHITESPACE,
	       "a\xE2\x80\x83"
	       "b",
	       "a b"); /* em space */
	EXPECT(ST_AN_KEYWORD, "New York, NY", "New York, NY");
	EXPECT(ST_AN_KEYWORD, "", "");
	EXPECT(ST_AN_ENGLISH, "running jumps", "run jump");
	EXPECT(ST_AN_ENGLISH, "The quick brown foxes are jumping over the lazy dogs",
	       "quick brown fox jump over lazi dog");
	EXPECT(ST_AN_ENGLISH, "O'Neil's dog's", "o'neil dog");
	EXPECT(ST_AN_ENGLISH, "the a an", "");
}

static void
test_positions(void)
{
	positions p = {0};
	uint32_t next = 0;
	const char *text = "the fox and the dog";
	CHECK(st_analyze(ST_AN_ENGLISH, text, strlen(text), 10, pos_fn, &p, &next) == CM_OK);
	REQUIRE(p.n == 2);
	CHECK(p.pos[0] == 11 && p.pos[1] == 14);
	CHECK(p.start[0] == 4 && p.end[0] == 7);
	CHECK(p.start[1] == 16 && p.end[1] == 19);
	CHECK(next == 15);

	memset(&p, 0, sizeof(p));
	text = "Ab Cd Ef";
	CHECK(st_analyze(ST_AN_STANDARD, text, strlen(text), 0, pos_fn, &p, &next) == CM_OK);
	CHECK(p.n == 3 && p.pos[0] == 0 && p.pos[2] == 2 && next == 3);
	/* trailing stop word still advances the position */
	text = "fox the";
	memset(&p, 0, sizeof(p));
	CHECK(st_analyze(ST_AN_ENGLISH, text, strlen(text), 0, pos_fn, &p, &next) == CM_OK);
	CHECK(p.n == 1 && next == 2);
	/* Unicode offsets are byte offsets */
	text = "Ñandú x";
	memset(&p, 0, sizeof(p));
	CHECK(st_analyze(ST_AN_STANDARD, text, strlen(text), 0, pos_fn, &p, &next) == CM_OK);
	CHECK(p.n == 2 && p.end[0] == 7 && p.start[1] == 8);
}

static void
test_early_stop(void)
{
	collect c;
	memset(&c, 0, sizeof(c));
	c.stop_after = 2;
	const char *text = "one two three four";
	uint32_t next = 0;
	CHECK(st_analyze(ST_AN_STANDARD, text, strlen(text), 0, collect_fn, &c, &next) == CM_OK);
	CHECK(c.count == 2 && strcmp(c.out, "one two") == 0);
}

static void
test_long_tokens(void)
{
	char text[1024];
	memset(text, 'a', 300);
	text[300] = '\0';
	collect c;
	run(ST_AN_STANDARD, text, &c);
	CHECK(c.count == 2);
	CHECK(c.maxlen == ST_MAX_TOKEN_LEN);
	CHECK(c.last.len == 300 - ST_MAX_TOKEN_LEN && c.last.start == ST_MAX_TOKEN_LEN);
	run(ST_AN_WHITESPACE, text, &c);
	CHECK(c.count == 2 && c.maxlen == ST_MAX_TOKEN_LEN);
	run(ST_AN_SIMPLE, text, &c);
	CHECK(c.count == 2 && c.maxlen == ST_MAX_TOKEN_LEN);
	run(ST_AN_KEYWORD, text, &c);
	CHECK(c.count == 1 && c.maxlen == 300);
	/* 300 two-byte letters: split by characters, not bytes */
	size_t n = 0;
	for (int i = 0; i < 300; i++) {
		text[n++] = (char)0xC3;
		text[n++] = (char)0xA9;
	}
	text[n] = '\0';
	run(ST_AN_STANDARD, text, &c);
	CHECK(c.count == 2 && c.maxlen == 2 * ST_MAX_TOKEN_LEN);
	/* a word that needs more than the stack buffer once decomposed and folded */
	n = 0;
	for (int i = 0; i < 250; i++) { /* U+FB03 (ﬃ) folds to "ffi" */
		text[n++] = (char)0xEF;
		text[n++] = (char)0xAC;
		text[n++] = (char)0x83;
	}
	text[n] = '\0';
	run(ST_AN_STANDARD, text, &c);
	CHECK(c.count == 1 && c.maxlen == 750);
}

static void
test_invalid_utf8(void)
{
	EXPECT(ST_AN_STANDARD,
	       "ab\xFF"
	       "cd \xC3",
	       "ab cd");
	EXPECT(ST_AN_STANDARD, "x\xE4\xB8y", "x y"); /* truncated 3-byte */
	EXPECT(ST_AN_STANDARD,
	       "a\xC0\xAF"
	       "b",
	       "a b"); /* overlong */
	EXPECT(ST_AN_STANDARD,
	       "a\xED\xA0\x80"
	       "b",
	       "a b"); /* surrogate */
	EXPECT(ST_AN_WHITESPACE,
	       "ab\x80"
	       "cd",
	       "ab cd");
	EXPECT(ST_AN_SIMPLE,
	       "ab\xF5\x80\x80\x80"
	       "cd",
	       "ab cd");
	EXPECT(ST_AN_ENGLISH,
	       "runs\xFE"
	       "jumping",
	       "run jump");
	/* random bytes: no crash, tokens within bounds */
	unsigned seed = 12345;
	char buf[512];
	for (int round = 0; round < 2000; round++) {
		for (size_t i = 0; i < sizeof(buf); i++) {
			seed = seed * 1103515245u + 12345u;
			buf[i] = (char)(seed >> 16);
		}
		for (int a = ST_AN_STANDARD; a <= ST_AN_ENGLISH; a++) {
			size_t cnt = 0;
			CHECK(st_analyze((st_analyzer_kind)a, buf, sizeof(buf), 0, count_fn, &cnt,
			                 NULL) == CM_OK);
		}
	}
}

/* Stemmers are per thread: concurrent english analysis gives the same
 * tokens as a single thread, and thread exit frees the stemmer (LSan). */
static const char *thread_text = "The runners were running quickly past jumping foxes, "
                                 "generously organizing nationalistic celebrations";
static char thread_expected[1024];

static void *
thread_main(void *arg)
{
	int *ok = arg;
	*ok = 1;
	for (int i = 0; i < 2000; i++) {
		collect c;
		memset(&c, 0, sizeof(c));
		if (st_analyze(ST_AN_ENGLISH, thread_text, strlen(thread_text), 0, collect_fn, &c,
		               NULL) != CM_OK ||
		    strcmp(c.out, thread_expected) != 0)
			*ok = 0;
	}
	return NULL;
}

static void
test_threads(void)
{
	collect c;
	snprintf(thread_expected, sizeof(thread_expected), "%s",
	         run(ST_AN_ENGLISH, thread_text, &c));
	CHECK(strcmp(thread_expected, "runner were run quick past jump fox generous organ "
	                              "nationalist celebr") == 0);
	pthread_t t[4];
	int ok[4];
	for (int i = 0; i < 4; i++)
		REQUIRE(pthread_create(&t[i], NULL, thread_main, &ok[i]) == 0);
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		CHECK(ok[i] == 1);
	}
}


/* ---- custom chains (index settings "analysis") ---- */

typedef struct {
	char out[8192];
	size_t n;
	bool with_pos, with_off, with_type;
} chain_out;

static int
chain_fn(void *ctx, const st_token *t)
{
	chain_out *c = ctx;
	int w = snprintf(c->out + c->n, sizeof(c->out) - c->n, "%s%.*s", c->n ? " " : "",
	                 (int)t->len, t->term);
	if (w > 0 && (size_t)w < sizeof(c->out) - c->n)
		c->n += (size_t)w;
	if (c->with_pos)
		c->n += (size_t)snprintf(c->out + c->n, sizeof(c->out) - c->n, "@%u", t->position);
	if (c->with_off)
		c->n += (size_t)snprintf(c->out + c->n, sizeof(c->out) - c->n, "[%u,%u]", t->start,
		                         t->end);
	if (c->with_type)
		c->n += (size_t)snprintf(c->out + c->n, sizeof(c->out) - c->n, "<%s>",
		                         t->type ? t->type : "?");
	return 0;
}

/* Builds a chain from JSON text (tokenizer, filters, char filters; NULL =
 * none) against an analysis from JSON (may be NULL), runs it over text,
 * and compares the rendering ("term@pos[start,end]" as asked). */
static void
chain_check(int line, const char *analysis, const char *tok, const char *filters,
            const char *cfs, const char *text, const char *flags, const char *want)
{
	cJSON *aj = analysis ? cJSON_Parse(analysis) : NULL, *tj = tok ? cJSON_Parse(tok) : NULL;
	cJSON *fj = filters ? cJSON_Parse(filters) : NULL, *cj = cfs ? cJSON_Parse(cfs) : NULL;
	st_analysis *a = NULL;
	st_analyzer *an = NULL;
	cm_error err = {0};
	CHECKF(st_analysis_parse(aj, 1, 3, &a, &err) == CM_OK, "line %d: %s", line, err.reason);
	cm_err rc = st_analyzer_build(a, tj, fj, cj, tj == NULL, &an, &err);
	CHECKF(rc == CM_OK, "line %d: build: %s", line, err.reason);
	if (rc == CM_OK) {
		chain_out c = {.with_pos = strchr(flags, 'p') != NULL,
		               .with_off = strchr(flags, 'o') != NULL,
		               .with_type = strchr(flags, 't') != NULL};
		CHECK(st_analyzer_run(an, text, strlen(text), 0, chain_fn, &c, NULL) == CM_OK);
		CHECKF(strcmp(c.out, want) == 0, "line %d: got [%s] want [%s]", line, c.out, want);
	}
	st_analyzer_free(an);
	st_analysis_unref(a);
	cJSON_Delete(aj);
	cJSON_Delete(tj);
	cJSON_Delete(fj);
	cJSON_Delete(cj);
}

#define CHAIN(tok, filters, cfs, text, flags, want)                                        \
	chain_check(__LINE__, NULL, tok, filters, cfs, text, flags, want)

static const char *const fox = "The 2 QUICK Brown-Foxes jumped over the lazy dog's bone.";

static void
test_tokenizers(void)
{
	/* the examples of ES's tokenizer reference pages */
	CHAIN("\"whitespace\"", NULL, NULL, fox, "",
	      "The 2 QUICK Brown-Foxes jumped over the lazy dog's bone.");
	CHAIN("\"letter\"", NULL, NULL, fox, "", "The QUICK Brown Foxes jumped over the lazy dog s bone");
	CHAIN("\"lowercase\"", NULL, NULL, fox, "", "the quick brown foxes jumped over the lazy dog s bone");
	CHAIN("\"standard\"", NULL, NULL, fox, "t",
	      "The<<ALPHANUM>> 2<<NUM>> QUICK<<ALPHANUM>> Brown<<ALPHANUM>> Foxes<<ALPHANUM>> "
	      "jumped<<ALPHANUM>> over<<ALPHANUM>> the<<ALPHANUM>> lazy<<ALPHANUM>> "
	      "dog's<<ALPHANUM>> bone<<ALPHANUM>>");
	CHAIN("{\"type\":\"standard\",\"max_token_length\":5}", NULL, NULL, fox, "",
	      "The 2 QUICK Brown Foxes jumpe d over the lazy dog's bone");
	CHAIN("\"keyword\"", NULL, NULL, "New York", "po", "New York@0[0,8]");
	CHAIN("\"pattern\"", NULL, NULL, "The foo_bar_size's default is 5.", "",
	      "The foo_bar_size s default is 5");
	CHAIN("{\"type\":\"pattern\",\"pattern\":\",\"}", NULL, NULL, "comma,separated,values",
	      "o", "comma[0,5] separated[6,15] values[16,22]");
	CHAIN("{\"type\":\"pattern\",\"pattern\":\"\\\"([^\\\"]*)\\\"\",\"group\":1}", NULL, NULL,
	      "a \"b c\" d \"e\"", "o", "b c[3,6] e[11,12]");
	CHAIN("{\"type\":\"pattern\",\"pattern\":\"\\\\d+\"}", NULL, NULL, "ab12cd345ef", "",
	      "ab cd ef");
	CHAIN("{\"type\":\"pattern\",\"pattern\":\"X\",\"flags\":\"CASE_INSENSITIVE\"}", NULL, NULL,
	      "axbXc", "", "a b c");
	CHAIN("{\"type\":\"char_group\",\"tokenize_on_chars\":[\"whitespace\",\"-\",\"\\n\"]}",
	      NULL, NULL, "The QUICK brown-fox", "o", "The[0,3] QUICK[4,9] brown[10,15] fox[16,19]");
	CHAIN("{\"type\":\"simple_pattern\",\"pattern\":\"[0123456789]{3}\"}", NULL, NULL,
	      "fd-786-335-514-x", "", "786 335 514");
	CHAIN("{\"type\":\"simple_pattern_split\",\"pattern\":\"_\"}", NULL, NULL,
	      "an_underscored_phrase", "", "an underscored phrase");
	CHAIN("\"path_hierarchy\"", NULL, NULL, "/one/two/three", "po",
	      "/one@0[0,4] /one/two@0[0,8] /one/two/three@0[0,14]");
	CHAIN("{\"type\":\"path_hierarchy\",\"delimiter\":\"-\",\"replacement\":\"/\","
	      "\"skip\":2}",
	      NULL, NULL, "one-two-three-four-five", "po",
	      "/three@0[7,13] /three/four@0[7,18] /three/four/five@0[7,23]");
	/* ngram: every gram one position on */
	CHAIN("\"ngram\"", NULL, NULL, "Quick Fox", "p",
	      "Q@0 Qu@1 u@2 ui@3 i@4 ic@5 c@6 ck@7 k@8 k @9  @10  F@11 F@12 Fo@13 o@14 ox@15 x@16");
	CHAIN("{\"type\":\"ngram\",\"min_gram\":3,\"max_gram\":3,\"token_chars\":[\"letter\","
	      "\"digit\"]}",
	      NULL, NULL, "2 Quick Foxes.", "", "Qui uic ick Fox oxe xes");
	CHAIN("\"edge_ngram\"", NULL, NULL, "Quick Fox", "", "Q Qu");
	CHAIN("{\"type\":\"edge_ngram\",\"min_gram\":2,\"max_gram\":10,\"token_chars\":[\"letter\","
	      "\"digit\"]}",
	      NULL, NULL, "2 Quick Foxes.", "po",
	      "Qu@0[2,4] Qui@1[2,5] Quic@2[2,6] Quick@3[2,7] Fo@4[8,10] Fox@5[8,11] Foxe@6[8,12] "
	      "Foxes@7[8,13]");
}

static void
test_filters(void)
{
	CHAIN("\"standard\"", "[\"lowercase\"]", NULL, "THE Quick FoX JUMPs", "",
	      "the quick fox jumps");
	CHAIN("\"standard\"", "[\"uppercase\"]", NULL, "the Quick FoX JUMPs", "",
	      "THE QUICK FOX JUMPS");
	CHAIN("\"standard\"", "[\"lowercase\"]", NULL, "ÉCOLE Straße", "", "école straße");
	CHAIN("\"standard\"", "[\"asciifolding\"]", NULL, "açaí à la carte", "", "acai a la carte");
	CHAIN("\"standard\"", "[{\"type\":\"asciifolding\",\"preserve_original\":true}]", NULL,
	      "açaí à la carte", "p", "acai@0 açaí@0 a@1 à@1 la@2 carte@3");
	/* stop: gaps where words went */
	CHAIN("\"standard\"", "[\"lowercase\",\"stop\"]", NULL, "a quick fox jumps over the lazy dog",
	      "po", "quick@1[2,7] fox@2[8,11] jumps@3[12,17] over@4[18,22] lazy@6[27,31] dog@7[32,35]");
	CHAIN("\"whitespace\"",
	      "[{\"type\":\"stop\",\"stopwords\":[\"and\",\"is\",\"the\"],\"ignore_case\":true}]", NULL,
	      "The fox AND the dog", "p", "fox@1 dog@4");
	CHAIN("\"whitespace\"", "[{\"type\":\"stop\",\"stopwords\":\"_none_\"}]", NULL, "the a", "",
	      "the a");
	/* ES's english stemmer is Porter; porter2 and snowball English are Snowball */
	CHAIN("\"whitespace\"", "[{\"type\":\"stemmer\",\"language\":\"english\"}]", NULL,
	      "fox running and jumping generously", "", "fox run and jump gener");
	CHAIN("\"whitespace\"", "[{\"type\":\"snowball\",\"language\":\"English\"}]", NULL,
	      "running generously", "", "run generous");
	CHAIN("\"whitespace\"", "[{\"type\":\"stemmer\",\"name\":\"french\"}]", NULL,
	      "continuellement", "", "continuel");
	CHAIN("\"whitespace\"", "[{\"type\":\"stemmer\",\"language\":\"possessive_english\"}]",
	      NULL, "dog's bones", "", "dog bones");
	CHAIN("\"whitespace\"",
	      "[{\"type\":\"keyword_marker\",\"keywords\":[\"running\"]},\"porter_stem\"]", NULL,
	      "running jumping", "", "running jump");
	CHAIN("\"whitespace\"", "[{\"type\":\"length\",\"min\":0,\"max\":4}]", NULL,
	      "the quick brown fox jumps over the lazy dog", "p",
	      "the@0 fox@3 over@5 the@6 lazy@7 dog@8");
	CHAIN("\"keyword\"", "[\"trim\"]", NULL, " fox ", "o", "fox[0,5]");
	CHAIN("\"whitespace\"", "[\"unique\"]", NULL, "the quick fox jumps the lazy fox", "p",
	      "the@0 quick@1 fox@2 jumps@3 lazy@4");
	/* folding with the original, folded again: two "e" at position 0 */
	CHAIN("\"whitespace\"",
	      "[{\"type\":\"asciifolding\",\"preserve_original\":true},\"asciifolding\","
	      "{\"type\":\"unique\",\"only_on_same_position\":true}]",
	      NULL, "é e", "p", "e@0 e@1");
	CHAIN("\"whitespace\"",
	      "[{\"type\":\"asciifolding\",\"preserve_original\":true},\"asciifolding\","
	      "\"unique\"]",
	      NULL, "é e", "p", "e@0");
	CHAIN("\"whitespace\"", "[\"truncate\"]", NULL, "the quinquennial extravaganza carried on",
	      "", "the quinquenni extravagan carried on");
	CHAIN("\"whitespace\"", "[{\"type\":\"truncate\",\"length\":2}]", NULL, "éèà", "", "éè");
	CHAIN("\"whitespace\"", "[\"reverse\"]", NULL, "quick fox jumps", "", "kciuq xof spmuj");
	CHAIN("\"whitespace\"", "[\"word_delimiter_graph\"]", NULL,
	      "Neil's-Super-Duper-XL500--42+AutoCoder", "",
	      "Neil Super Duper XL 500 42 Auto Coder");
	CHAIN("\"whitespace\"", "[{\"type\":\"word_delimiter_graph\",\"catenate_words\":true}]",
	      NULL, "the wi-fi is enabled", "po",
	      "the@0[0,3] wifi@1[4,9] wi@1[4,6] fi@2[7,9] is@3[10,12] enabled@4[13,20]");
	CHAIN("\"whitespace\"", "[\"shingle\"]", NULL, "quick brown fox jumps", "pt",
	      "quick@0<word> quick brown@0<shingle> brown@1<word> brown fox@1<shingle> fox@2<word> "
	      "fox jumps@2<shingle> jumps@3<word>");
	CHAIN("\"whitespace\"", "[\"ngram\"]", NULL, "Quick fox", "p",
	      "Q@0 Qu@0 u@0 ui@0 i@0 ic@0 c@0 ck@0 k@0 f@1 fo@1 o@1 ox@1 x@1");
	CHAIN("\"standard\"", "[\"edge_ngram\"]", NULL, "the quick brown fox jumps", "",
	      "t th q qu b br f fo j ju");
	/* ES's reference examples */
	CHAIN("\"standard\"", "[{\"type\":\"limit\",\"max_token_count\":2}]", NULL,
	      "quick fox jumps over lazy dog", "", "quick fox");
	CHAIN("\"whitespace\"", "[{\"type\":\"keep\",\"keep_words\":[\"dog\",\"elephant\","
	      "\"fox\"]}]",
	      NULL, "the quick fox jumps over the lazy dog", "p", "fox@2 dog@7");
	CHAIN("\"standard\"", "[{\"type\":\"keep_types\",\"types\":[\"<NUM>\"]}]", NULL,
	      "1 quick fox 2 lazy dogs", "p", "1@0 2@3");
	CHAIN("\"standard\"",
	      "[{\"type\":\"keep_types\",\"types\":[\"<NUM>\"],\"mode\":\"exclude\"}]", NULL,
	      "1 quick fox 2 lazy dogs", "", "quick fox lazy dogs");
	CHAIN("\"standard\"", "[\"elision\"]", NULL, "j’examine près du wharf", "",
	      "examine près du wharf");
	CHAIN("\"standard\"", "[\"elision\"]", NULL, "L'avion", "", "avion");
	CHAIN("\"standard\"", "[\"apostrophe\"]", NULL, "Istanbul'a veya Istanbul'dan", "",
	      "Istanbul veya Istanbul");
	CHAIN("\"standard\"", "[\"decimal_digit\"]", NULL, "१-one two-२ ३", "", "1 one two 2 3");
	CHAIN("\"standard\"",
	      "[{\"type\":\"pattern_replace\",\"pattern\":\"(dog)\",\"replacement\":"
	      "\"watch$1\"}]",
	      NULL, "foxes jump lazy dogs", "o", "foxes[0,5] jump[6,10] lazy[11,15] watchdogs[16,20]");
	CHAIN("\"whitespace\"",
	      "[{\"type\":\"pattern_replace\",\"pattern\":\"a\",\"replacement\":\"x\","
	      "\"all\":false}]",
	      NULL, "banana", "", "bxnana");
	CHAIN("\"whitespace\"",
	      "[{\"type\":\"asciifolding\",\"preserve_original\":true},\"asciifolding\","
	      "\"remove_duplicates\"]",
	      NULL, "é e", "p", "e@0 e@1");
	CHAIN("\"whitespace\"",
	      "[{\"type\":\"stemmer_override\",\"rules\":[\"running, runs => run\","
	      "\"stemmer => stemmer\"]},\"porter_stem\"]",
	      NULL, "running stemmer jumping", "", "run stemmer jump");
	CHAIN("\"whitespace\"", "[\"fingerprint\"]", NULL, "zebra jumps over resting resting dog",
	      "pot", "dog jumps over resting zebra@0[0,36]<fingerprint>");
	CHAIN("\"whitespace\"", "[\"flatten_graph\"]", NULL, "a b", "p", "a@0 b@1");
}

static void
test_synonyms(void)
{
	const char *f = "[\"lowercase\",{\"type\":\"synonym\",\"synonyms\":[\"Quick, fast\","
	                "\"ny, new york\",\"i-pod, i pod => ipod\",\"# a comment\"]}]";
	CHAIN("\"standard\"", f, NULL, "Quick fox", "pot",
	      "quick@0[0,5]<<ALPHANUM>> fast@0[0,5]<SYNONYM> fox@1[6,9]<<ALPHANUM>>");
	CHAIN("\"standard\"", f, NULL, "to ny", "pt",
	      "to@0<<ALPHANUM>> ny@1<<ALPHANUM>> new@1<SYNONYM> york@2<SYNONYM>");
	CHAIN("\"standard\"", f, NULL, "new york city", "po",
	      "new@0[0,3] ny@0[0,8] york@1[4,8] city@2[9,13]");
	CHAIN("\"standard\"", f, NULL, "my i pod", "pot",
	      "my@0[0,2]<<ALPHANUM>> ipod@1[3,8]<SYNONYM>");
	/* expand false: every word maps to the first */
	CHAIN("\"standard\"",
	      "[{\"type\":\"synonym_graph\",\"expand\":false,\"synonyms\":[\"tv, television\"]}]",
	      NULL, "television tv", "p", "tv@0 tv@1");
	/* a stop filter before the synonyms removes a rule's word: lenient skips it */
	chain_check(__LINE__,
	            "{\"filter\":{\"syn\":{\"type\":\"synonym\",\"lenient\":true,"
	            "\"synonyms\":[\"the, le\",\"fox, renard\"]}}}",
	            "\"standard\"", "[\"stop\",\"syn\"]", NULL, "the fox", "p", "fox@1 renard@1");
}

static void
test_char_filters(void)
{
	CHAIN("\"keyword\"", NULL, "[\"html_strip\"]", "<p>I&apos;m so <b>happy</b>!</p>", "o",
	      "\nI'm so happy!\n[0,32]");
	CHAIN("\"keyword\"", NULL, "[{\"type\":\"html_strip\",\"escaped_tags\":[\"b\"]}]",
	      "<p>I&apos;m so <b>happy</b>!</p>", "", "\nI'm so <b>happy</b>!\n");
	CHAIN("\"standard\"", NULL, "[\"html_strip\"]", "<b>foo</b> bar<br>baz &amp; qux", "o",
	      "foo[3,6] bar[11,14] baz[18,21] qux[28,31]");
	CHAIN("\"keyword\"", NULL,
	      "[{\"type\":\"mapping\",\"mappings\":[\"٠ => 0\",\"١ => 1\",\"٢ => 2\",\"٥ => 5\"]}]",
	      "My license plate is ٢٥٠١٥", "", "My license plate is 25015");
	CHAIN("\"standard\"", NULL,
	      "[{\"type\":\"mapping\",\"mappings\":[\"ph => f\",\"qu => k\"]}]", "phone quick", "o",
	      "fone[0,5] kick[6,11]");
	CHAIN("\"standard\"", NULL,
	      "[{\"type\":\"pattern_replace\",\"pattern\":\"(\\\\d+)-\",\"replacement\":\"$1_\"}]",
	      "My credit card is 123-456-789", "o",
	      "My[0,2] credit[3,9] card[10,14] is[15,17] 123_456_789[18,29]");
	/* chained char filters compose their offset maps */
	CHAIN("\"standard\"", NULL,
	      "[\"html_strip\",{\"type\":\"mapping\",\"mappings\":[\"ph => f\"]}]",
	      "<i>phone</i> x", "o", "fone[3,8] x[13,14]");
}

static void
test_normalizers_and_settings(void)
{
	/* a normalizer: the keyword tokenizer, lowercase and folding */
	chain_check(__LINE__, NULL, NULL, "[\"lowercase\",\"asciifolding\"]", NULL, "Café BAR", "",
	            "cafe bar");
	cJSON *j = cJSON_Parse(
	    "{\"analyzer\":{\"a\":{\"type\":\"custom\",\"tokenizer\":\"whitespace\",\"filter\":"
	    "[\"lowercase\",\"my_stop\"]},\"std_stop\":{\"type\":\"standard\",\"stopwords\":"
	    "[\"foo\"]},\"plain\":{\"type\":\"standard\"}},\"filter\":{\"my_stop\":{\"type\":\"stop\","
	    "\"stopwords\":[\"x\"]}},\"normalizer\":{\"n\":{\"type\":\"custom\",\"filter\":"
	    "[\"uppercase\"]}}}");
	st_analysis *a = NULL;
	cm_error err = {0};
	REQUIRE(st_analysis_parse(j, 1, 3, &a, &err) == CM_OK);
	const st_analyzer *an = st_analysis_analyzer(a, "a");
	REQUIRE(an != NULL);
	chain_out c = {.with_pos = true};
	uint32_t next = 0;
	CHECK(st_analyzer_run(an, "A x B x", 7, 10, chain_fn, &c, &next) == CM_OK);
	CHECKF(strcmp(c.out, "a@10 b@12") == 0, "%s", c.out);
	CHECK(next == 14); /* the trailing stop word's gap counts */
	memset(&c, 0, sizeof(c));
	CHECK(st_analyzer_run(st_analysis_analyzer(a, "std_stop"), "Foo Bar", 7, 0, chain_fn, &c,
	                      NULL) == CM_OK);
	CHECKF(strcmp(c.out, "bar") == 0, "%s", c.out);
	st_analyzer_kind k;
	const st_analyzer *custom;
	CHECK(st_analysis_resolve(a, "plain", &k, &custom) && k == ST_AN_STANDARD && !custom);
	CHECK(st_analysis_resolve(a, "a", &k, &custom) && k == ST_AN_CUSTOM && custom == an);
	CHECK(st_analysis_resolve(a, "english", &k, &custom) && k == ST_AN_ENGLISH);
	CHECK(!st_analysis_resolve(a, "nope", &k, &custom));
	cm_buf b;
	cm_buf_init(&b, CM_MEM_STORAGE);
	CHECK(st_normalize(st_analysis_normalizer(a, "n"), "abc", 3, &b) == CM_OK);
	CHECK(b.len == 3 && memcmp(b.data, "ABC", 3) == 0);
	cm_buf_reset(&b);
	CHECK(st_normalize(st_analysis_normalizer(NULL, "lowercase"), "AbC", 3, &b) == CM_OK);
	CHECK(b.len == 3 && memcmp(b.data, "abc", 3) == 0);
	cm_buf_free(&b);
	st_analysis_unref(a);
	cJSON_Delete(j);

	/* invalid settings: ES's messages */
	static const struct {
		const char *json, *reason;
	} bad[] = {
	    {"{\"analyzer\":{\"x\":{\"type\":\"nope\"}}}", "Unknown analyzer type [nope] for [x]"},
	    {"{\"analyzer\":{\"x\":{\"tokenizer\":\"nope\"}}}",
	     "Custom Analyzer [x] failed to find tokenizer under name [nope]"},
	    {"{\"analyzer\":{\"x\":{\"tokenizer\":\"standard\",\"filter\":[\"nope\"]}}}",
	     "Custom Analyzer [x] failed to find filter under name [nope]"},
	    {"{\"analyzer\":{\"x\":{\"tokenizer\":\"standard\",\"char_filter\":[\"nope\"]}}}",
	     "Custom Analyzer [x] failed to find char_filter under name [nope]"},
	    {"{\"analyzer\":{\"x\":{\"type\":\"custom\"}}}",
	     "Custom Analyzer [x] must be configured with a tokenizer"},
	    {"{\"analyzer\":{\"x\":{\"filter\":[\"lowercase\"]}}}",
	     "analyzer [x] must specify either an analyzer type, or a tokenizer"},
	    {"{\"filter\":{\"f\":{\"type\":\"nope\"}}}", "Unknown filter type [nope] for [f]"},
	    {"{\"tokenizer\":{\"t\":{\"type\":\"nope\"}}}", "Unknown tokenizer type [nope] for [t]"},
	    {"{\"char_filter\":{\"c\":{\"type\":\"nope\"}}}",
	     "Unknown char_filter type [nope] for [c]"},
	    {"{\"tokenizer\":{\"t\":{\"type\":\"pattern\",\"pattern\":\"(\"}}}",
	     "Invalid regex pattern [(]"},
	    {"{\"tokenizer\":{\"t\":{\"type\":\"ngram\",\"min_gram\":3,\"max_gram\":2}}}",
	     "minGram must not be greater than maxGram"},
	    {"{\"tokenizer\":{\"t\":{\"type\":\"ngram\",\"min_gram\":1,\"max_gram\":3}}}",
	     "The difference between max_gram and min_gram in NGram Tokenizer must be less than "
	     "or equal to: [1] but was [2]"},
	    {"{\"normalizer\":{\"n\":{\"filter\":[\"stop\"]}}}",
	     "Custom normalizer [n] may not use filter [stop]"},
	    {"{\"normalizer\":{\"n\":{\"tokenizer\":\"standard\"}}}",
	     "Custom normalizer [n] cannot configure a tokenizer"},
	    {"{\"filter\":{\"s\":{\"type\":\"synonym\"}}}",
	     "synonym requires either `synonyms` or `synonyms_path` to be configured"},
	    {"{\"analyzer\":{\"x\":{\"tokenizer\":\"standard\",\"filter\":[\"s\"]}},\"filter\":{\"s\":"
	     "{\"type\":\"synonym\",\"synonyms\":[\"the, a\"]}}}",
	     "failed to build synonyms"},
	    {"{\"analyzer\":{\"x\":{\"tokenizer\":\"standard\",\"filter\":[\"stop\",\"s\"]}},"
	     "\"filter\":{\"s\":{\"type\":\"synonym\",\"synonyms\":[\"the, a\"]}}}",
	     "failed to build synonyms"},
	    {"{\"bogus\":{}}", "unknown setting [index.analysis.bogus]"},
	    {"{\"analyzer\":{\"x\":{\"tokenizer\":\"standard\",\"filter\":[\"s\"]}},"
	     "\"filter\":{\"s\":{\"type\":\"synonym\",\"synonyms\":[\"a => b => c\"]}}}",
	     "Invalid synonym rule at line 1"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		cJSON *bj = cJSON_Parse(bad[i].json);
		cm_error e = {0};
		st_analysis *x = NULL;
		cm_err rc = st_analysis_parse(bj, 1, 3, &x, &e);
		/* the synonym case above without a stop filter is fine: "the" survives */
		if (i == 15) {
			CHECKF(rc == CM_OK, "%s: %s", bad[i].json, e.reason);
		} else {
			CHECKF(rc == CM_EINVAL && strstr(e.reason, bad[i].reason) != NULL,
			       "%s: got [%s]", bad[i].json, e.reason);
			CHECK(x == NULL);
		}
		st_analysis_unref(x);
		cJSON_Delete(bj);
	}
}

/* Random text (markup, entities, apostrophes, digits, multi-byte and
 * invalid UTF-8) through chains of every component: offsets stay inside
 * the input, positions never go back (run under ASan in CI). */
typedef struct {
	size_t len;
	uint32_t last_pos;
	int bad;
	int n;
} sane;

static int
sane_fn(void *ctx, const st_token *t)
{
	sane *c = ctx;
	if (t->start > t->end || t->end > c->len || (c->n > 0 && t->position < c->last_pos))
		c->bad++;
	c->last_pos = t->position;
	c->n++;
	return 0;
}

static void
test_chain_random(void)
{
	static const char *const atoms[] = {"<b>", "</b>", "<br>", "<!-- x -->", "&amp;", "&#233;",
	                                    "&bogus;", "'s", "’", "-", "_", "Foo", "bar", "42",
	                                    "é", "ß", "日本", "\xff", "\xc3", " ", "  ", "\n", "ph",
	                                    "a", "the", "Wi-Fi", "XL500", "/", "<script>x</script>"};
	const char *chains[][3] = {
	    {"\"standard\"",
	     "[\"lowercase\",{\"type\":\"asciifolding\",\"preserve_original\":true},\"stop\","
	     "{\"type\":\"synonym\",\"synonyms\":[\"foo, bar baz\",\"bar => quick wi\"]},"
	     "\"word_delimiter_graph\",\"shingle\",\"unique\",\"porter_stem\","
	     "{\"type\":\"length\",\"max\":6},\"reverse\",\"truncate\",\"edge_ngram\","
	     "\"remove_duplicates\",\"elision\",\"decimal_digit\",\"trim\"]",
	     "[\"html_strip\",{\"type\":\"mapping\",\"mappings\":[\"ph => f\",\"a => \"]},"
	     "{\"type\":\"pattern_replace\",\"pattern\":\"[0-9]+\",\"replacement\":\"<$0>\"}]"},
	    {"{\"type\":\"ngram\",\"min_gram\":1,\"max_gram\":2}", "[\"uppercase\"]",
	     "[\"html_strip\"]"},
	    {"{\"type\":\"edge_ngram\",\"token_chars\":[\"letter\"]}", "[\"fingerprint\"]",
	     NULL},
	    {"\"path_hierarchy\"", "[{\"type\":\"keep_types\",\"types\":[\"word\"]}]", NULL},
	    {"{\"type\":\"char_group\",\"tokenize_on_chars\":[\"whitespace\",\"-\"]}",
	     "[{\"type\":\"limit\",\"max_token_count\":5}]", NULL},
	    {"{\"type\":\"pattern\",\"pattern\":\"(a|b)*\"}", "[\"ngram\"]",
	     "[{\"type\":\"pattern_replace\",\"pattern\":\"x*\",\"replacement\":\"y\"}]"},
	    {"\"whitespace\"", "[{\"type\":\"stemmer\",\"language\":\"german\"}]", NULL},
	};
	unsigned seed = 12345;
	for (size_t ci = 0; ci < sizeof(chains) / sizeof(chains[0]); ci++) {
		cJSON *tj = cJSON_Parse(chains[ci][0]), *fj = cJSON_Parse(chains[ci][1]);
		cJSON *cj = chains[ci][2] ? cJSON_Parse(chains[ci][2]) : NULL;
		st_analyzer *an = NULL;
		cm_error err = {0};
		REQUIRE(tj && fj && (!chains[ci][2] || cj));
		cm_err rc = st_analyzer_build(NULL, tj, fj, cj, false, &an, &err);
		CHECKF(rc == CM_OK, "chain %zu: %s", ci, err.reason);
		for (int it = 0; rc == CM_OK && it < 300; it++) {
			char text[512];
			size_t n = 0;
			int natoms = (int)(rand_r(&seed) % 24);
			for (int k = 0; k < natoms; k++) {
				const char *a = atoms[rand_r(&seed) % (sizeof(atoms) / sizeof(*atoms))];
				size_t l = strlen(a);
				if (n + l >= sizeof(text))
					break;
				memcpy(text + n, a, l);
				n += l;
			}
			sane c = {.len = n};
			CHECK(st_analyzer_run(an, text, n, 0, sane_fn, &c, NULL) == CM_OK);
			CHECKF(c.bad == 0, "chain %zu on [%.*s]", ci, (int)n, text);
		}
		st_analyzer_free(an);
		cJSON_Delete(tj);
		cJSON_Delete(fj);
		cJSON_Delete(cj);
	}
}

static void
bench(void)
{
	/* A rough throughput figure for the report, not a pass/fail gate. */
	const char *text = "Amber Duke lives at 880 Holmes Lane in Brogan, IL and works for "
	                   "Pyrami as an engineer; email amberduke@pyrami.com";
	size_t n = strlen(text), total = 0;
	struct timespec a, b;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
	int iters = 200000;
	for (int i = 0; i < iters; i++)
		st_analyze(ST_AN_STANDARD, text, n, 0, count_fn, &total, NULL);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
	double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	printf("standard analyzer: %.1f MB/s, %.1f M tokens/s\n", (double)n * iters / s / 1e6,
	       (double)total / s / 1e6);
	total = 0;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
	for (int i = 0; i < iters / 4; i++)
		st_analyze(ST_AN_ENGLISH, text, n, 0, count_fn, &total, NULL);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
	s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	printf("english analyzer: %.1f MB/s\n", (double)n * (iters / 4) / s / 1e6);
}

int
main(void)
{
	test_names();
	test_standard();
	test_other_analyzers();
	test_positions();
	test_early_stop();
	test_long_tokens();
	test_invalid_utf8();
	test_threads();
	test_tokenizers();
	test_filters();
	test_synonyms();
	test_char_filters();
	test_normalizers_and_settings();
	test_chain_random();
	bench();
	return check_report("analysis_test");
}
