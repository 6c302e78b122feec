/* Analyzer tests: every analyzer, Unicode segmentation, positions with
 * stop-word gaps, stemming, long tokens, invalid UTF-8. */
#include "storage/st_types.h"

#include <pthread.h>
#include <stdio.h>
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
	bench();
	return check_report("analysis_test");
}
