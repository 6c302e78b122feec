/* Analyzers: standard (UAX#29-style word segmentation as Lucene's
 * StandardTokenizer does it), simple, whitespace, keyword and english.
 *
 * Plain ASCII never reaches utf8proc: a 256-entry class table and a
 * byte-wise lowercase cover it, since indexing small documents is
 * dominated by this loop. Other code points are decoded here (bad bytes
 * become separators) and classified by utf8proc's general category plus
 * the code point ranges that UAX#29 treats specially (Han, kana, the
 * Mid* punctuation). */
#include "st_types.h"

#include <libstemmer.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "../common/cm_alloc.h"
#include "an_private.h"

#define AN_KIND_RAW 31 /* an_state.kind of the raw mode (no analyzer has it) */

/* Word-break classes (a subset of UAX#29's Word_Break property). */
enum {
	W_SEP,       /* not part of any word */
	W_LETTER,    /* ALetter, Hebrew_Letter, letters of scripts without spaces */
	W_NUM,       /* Numeric */
	W_KATA,      /* Katakana: runs join (WB13) */
	W_IDEO,      /* Han, Hiragana: one token per character, like Lucene */
	W_MIDLET,    /* MidLetter ':' */
	W_MIDNUM,    /* MidNum ',' ';' */
	W_MIDNUMLET, /* MidNumLet and Single_Quote '.' '\'' */
	W_ENL,       /* ExtendNumLet '_' */
	W_EXTEND,    /* Extend, Format, ZWJ: attach to what precedes (WB4) */
};

static const uint8_t ascii_word_class[128] = {
    ['0' ... '9'] = W_NUM, ['A' ... 'Z'] = W_LETTER, ['a' ... 'z'] = W_LETTER,
    ['\''] = W_MIDNUMLET,  ['.'] = W_MIDNUMLET,      [':'] = W_MIDLET,
    [','] = W_MIDNUM,      [';'] = W_MIDNUM,         ['_'] = W_ENL,
};

static const uint8_t ascii_space[128] = {
    ['\t'] = 1, ['\n'] = 1, ['\v'] = 1, ['\f'] = 1, ['\r'] = 1,
    [0x1c] = 1, [0x1d] = 1, [0x1e] = 1, [0x1f] = 1, [' '] = 1,
};

static inline char
ascii_lower(uint8_t c)
{
	return (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
}

/* Decodes one UTF-8 sequence; returns -1 (length 1) for any malformed,
 * overlong, surrogate or truncated sequence. */
static int32_t
utf8_decode(const uint8_t *s, size_t n, size_t *len)
{
	uint8_t c = s[0];
	*len = 1;
	if (c < 0x80)
		return c;
	if (c >= 0xC2 && c <= 0xDF) {
		if (n < 2 || (s[1] & 0xC0) != 0x80)
			return -1;
		*len = 2;
		return ((int32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
	}
	if (c >= 0xE0 && c <= 0xEF) {
		if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
			return -1;
		if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F))
			return -1;
		*len = 3;
		return ((int32_t)(c & 0x0F) << 12) | ((int32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
	}
	if (c >= 0xF0 && c <= 0xF4) {
		if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 ||
		    (s[3] & 0xC0) != 0x80)
			return -1;
		if ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] > 0x8F))
			return -1;
		*len = 4;
		return ((int32_t)(c & 0x07) << 18) | ((int32_t)(s[1] & 0x3F) << 12) |
		       ((int32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
	}
	return -1;
}

static bool
is_han(int32_t c)
{
	return (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF) ||
	       (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x20000 && c <= 0x3134F) ||
	       (c >= 0x2E80 && c <= 0x2FDF) || (c >= 0x3005 && c <= 0x3007) ||
	       (c >= 0x3021 && c <= 0x3029) || (c >= 0x3038 && c <= 0x303B);
}

static bool
is_hiragana(int32_t c)
{
	return (c >= 0x3041 && c <= 0x3096) || (c >= 0x309D && c <= 0x309F) ||
	       (c >= 0x1B001 && c <= 0x1B11F);
}

static bool
is_katakana(int32_t c)
{
	return (c >= 0x30A0 && c <= 0x30FA) || (c >= 0x30FC && c <= 0x30FF) ||
	       (c >= 0x31F0 && c <= 0x31FF) || (c >= 0x32D0 && c <= 0x32FE) ||
	       (c >= 0x3300 && c <= 0x3357) || (c >= 0xFF66 && c <= 0xFF9F) ||
	       (c >= 0x3031 && c <= 0x3035) || c == 0x309B || c == 0x309C || c == 0x1B000;
}

static int
word_class_slow(int32_t c)
{
	/* clang-format off */
	switch (c) {
	case 0x00B7: case 0x0387: case 0x05F4: case 0x2027: case 0xFE13: case 0xFE55:
	case 0xFF1A:
		return W_MIDLET;
	case 0x037E: case 0x0589: case 0x060C: case 0x060D: case 0x066C: case 0x07F8:
	case 0x2044: case 0xFE10: case 0xFE14: case 0xFE50: case 0xFE54: case 0xFF0C:
	case 0xFF1B:
		return W_MIDNUM;
	case 0x2018: case 0x2019: case 0x2024: case 0xFE52: case 0xFF07: case 0xFF0E:
		return W_MIDNUMLET;
	case 0x202F:
		return W_ENL;
	case 0x200B: /* zero width space separates words */
		return W_SEP;
	default:
		break;
	}
	/* clang-format on */
	if (is_katakana(c))
		return W_KATA;
	utf8proc_category_t cat = utf8proc_category(c);
	switch (cat) {
	case UTF8PROC_CATEGORY_LU:
	case UTF8PROC_CATEGORY_LL:
	case UTF8PROC_CATEGORY_LT:
	case UTF8PROC_CATEGORY_LM:
	case UTF8PROC_CATEGORY_LO:
	case UTF8PROC_CATEGORY_NL:
		if (is_han(c) || is_hiragana(c))
			return W_IDEO;
		return W_LETTER;
	case UTF8PROC_CATEGORY_ND:
		return W_NUM;
	case UTF8PROC_CATEGORY_MN:
	case UTF8PROC_CATEGORY_MC:
	case UTF8PROC_CATEGORY_ME:
	case UTF8PROC_CATEGORY_CF:
		return W_EXTEND;
	case UTF8PROC_CATEGORY_PC:
		return W_ENL;
	default:
		/* emoji (So, Sk), punctuation, spaces, unassigned */
		return W_SEP;
	}
}

static inline int
word_class_at(const uint8_t *s, size_t n, size_t p, size_t *len)
{
	if (s[p] < 0x80) {
		*len = 1;
		return ascii_word_class[s[p]];
	}
	int32_t c = utf8_decode(s + p, n - p, len);
	return c < 0 ? W_SEP : word_class_slow(c);
}

/* ---- the token sink: folding, english filters, positions ---- */

typedef struct an_state {
	st_analyzer_kind kind;
	const uint8_t *text;
	st_token_fn fn;
	void *ctx;
	uint32_t pos;
	bool stopped;
	cm_err err;
	struct sb_stemmer *stemmer;
	uint32_t max_len;  /* code points per token (ST_MAX_TOKEN_LEN unless raw) */
	an_raw_fn raw;     /* kind AN_KIND_RAW: custom chains take the bytes here */
	void *raw_ctx;
	char term[4 * 1024];
	utf8proc_int32_t ubuf[1024];
} an_state;

/* Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET, sorted. */
static const char *const english_stop[] = {
    "a",   "an",    "and",  "are",   "as",    "at",   "be",   "but", "by",  "for",  "if",
    "in",  "into",  "is",   "it",    "no",    "not",  "of",   "on",  "or",  "such", "that",
    "the", "their", "then", "there", "these", "they", "this", "to",  "was", "will", "with",
};

static bool
is_english_stop(const char *t, size_t n)
{
	if (n == 0 || n > 5)
		return false;
	size_t lo = 0, hi = sizeof(english_stop) / sizeof(english_stop[0]);
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const char *w = english_stop[mid];
		size_t wn = strlen(w);
		int c = memcmp(t, w, n < wn ? n : wn);
		if (c == 0)
			c = (n > wn) - (n < wn);
		if (c == 0)
			return true;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return false;
}

/* Stemmers keep state between calls: one per thread, freed at thread exit. */
static pthread_key_t stemmer_key;
static pthread_once_t stemmer_once = PTHREAD_ONCE_INIT;
static _Thread_local struct sb_stemmer *thread_stemmer;

static void
stemmer_destroy(void *p)
{
	sb_stemmer_delete(p);
}

static void
stemmer_key_init(void)
{
	pthread_key_create(&stemmer_key, stemmer_destroy);
}

static struct sb_stemmer *
stemmer_get(void)
{
	if (thread_stemmer != NULL)
		return thread_stemmer;
	pthread_once(&stemmer_once, stemmer_key_init);
	thread_stemmer = sb_stemmer_new("english", NULL);
	if (thread_stemmer != NULL)
		pthread_setspecific(stemmer_key, thread_stemmer);
	return thread_stemmer;
}

static void
deliver(an_state *st, const char *term, size_t n, size_t start, size_t end)
{
	st_token tok = {.term = term,
	                .len = n,
	                .position = st->pos++,
	                .start = (uint32_t)start,
	                .end = (uint32_t)end};
	if (st->fn(st->ctx, &tok) != 0)
		st->stopped = true;
}

/* Case folds and composes (NFC) a non-ASCII token. Returns the folded
 * length, or the raw bytes when utf8proc refuses them. *out may point to
 * heap memory the caller frees (when *heap is set). */
static size_t
fold_unicode(an_state *st, const uint8_t *s, size_t n, const char **out, void **heap)
{
	const utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_CASEFOLD;
	size_t cap = sizeof(st->ubuf) / sizeof(st->ubuf[0]);
	utf8proc_int32_t *buf = st->ubuf;
	*heap = NULL;
	utf8proc_ssize_t r =
	    utf8proc_decompose(s, (utf8proc_ssize_t)n, buf, (utf8proc_ssize_t)cap, opt);
	if (r > (utf8proc_ssize_t)cap) {
		/* Rare: a token whose decomposition outgrows the stack buffer. */
		buf = cm_malloc(CM_MEM_STORAGE, (size_t)r * sizeof(*buf) + 4);
		*heap = buf;
		r = utf8proc_decompose(s, (utf8proc_ssize_t)n, buf, r, opt);
	}
	if (r < 0) {
		*out = (const char *)s;
		return n;
	}
	r = utf8proc_reencode(buf, r, opt);
	if (r < 0) {
		*out = (const char *)s;
		return n;
	}
	*out = (const char *)buf;
	return (size_t)r;
}

/* Delivers bytes [start,end) of the input as a token, after the
 * analyzer's filters. */
static void
emit(an_state *st, size_t start, size_t end, bool nonascii)
{
	const uint8_t *s = st->text + start;
	size_t n = end - start;
	/* one test for the kinds that take the bytes as they are */
	if ((1u << st->kind) & ((1u << ST_AN_WHITESPACE) | (1u << ST_AN_KEYWORD) | (1u << AN_KIND_RAW))) {
		if (st->kind == AN_KIND_RAW) /* custom chains: bytes [start,end) unfiltered */
			st->raw(st->raw_ctx, start, end);
		else
			deliver(st, (const char *)s, n, start, end);
		return;
	}
	const char *t;
	void *heap = NULL;
	if (!nonascii) {
		/* n <= ST_MAX_TOKEN_LEN here: ASCII tokens are one byte per char. */
		for (size_t i = 0; i < n; i++)
			st->term[i] = ascii_lower(s[i]);
		t = st->term;
	} else {
		n = fold_unicode(st, s, n, &t, &heap);
	}
	if (st->kind == ST_AN_ENGLISH) {
		/* EnglishPossessiveFilter: 's, ’s, ＇s */
		if (n >= 2 && t[n - 1] == 's') {
			if (t[n - 2] == '\'')
				n -= 2;
			else if (n >= 4 && memcmp(t + n - 4, "\xE2\x80\x99", 3) == 0)
				n -= 4;
			else if (n >= 4 && memcmp(t + n - 4, "\xEF\xBC\x87", 3) == 0)
				n -= 4;
		}
		if (n == 0 || is_english_stop(t, n)) {
			st->pos++; /* a gap, as Lucene's StopFilter leaves */
			goto out;
		}
		const sb_symbol *stem = sb_stemmer_stem(st->stemmer, (const sb_symbol *)t, (int)n);
		if (stem != NULL) {
			t = (const char *)stem;
			n = (size_t)sb_stemmer_length(st->stemmer);
		}
	}
	deliver(st, t, n, start, end);
out:
	cm_free(CM_MEM_STORAGE, heap);
}

/* ---- tokenizers ---- */

static inline __attribute__((always_inline)) bool
word_joins(int last, int next)
{
	switch (next) {
	case W_LETTER:
	case W_NUM:
		return last == W_LETTER || last == W_NUM || last == W_ENL;
	case W_KATA:
		return last == W_KATA || last == W_ENL;
	case W_ENL:
		return last == W_LETTER || last == W_NUM || last == W_KATA || last == W_ENL;
	default:
		return false;
	}
}

/* inlined into st_analyze, as before the raw mode shared it */
static inline __attribute__((always_inline)) void
tokenize_standard(an_state *st, size_t len)
{
	const uint8_t *s = st->text;
	const uint32_t max_len = st->max_len; /* a local: fn calls cannot change it */
	size_t p = 0;
	while (p < len && !st->stopped) {
		size_t cl;
		int c = word_class_at(s, len, p, &cl);
		if (c == W_IDEO) {
			size_t e = p + cl, el;
			while (e < len && word_class_at(s, len, e, &el) == W_EXTEND)
				e += el;
			emit(st, p, e, true);
			p = e;
			continue;
		}
		if (c != W_LETTER && c != W_NUM && c != W_KATA && c != W_ENL) {
			p += cl;
			continue;
		}
		size_t start = p;
		int last = c;
		bool alnum = c != W_ENL, nonascii = s[p] >= 0x80;
		uint32_t ncp = 1;
		p += cl;
		while (p < len) {
			size_t cl2, take = 0;
			uint32_t add = 1;
			int c2 = word_class_at(s, len, p, &cl2), next = last;
			if (c2 == W_EXTEND) {
				take = cl2;
			} else if (word_joins(last, c2)) {
				take = cl2;
				next = c2;
			} else if ((last == W_LETTER && (c2 == W_MIDLET || c2 == W_MIDNUMLET)) ||
			           (last == W_NUM && (c2 == W_MIDNUM || c2 == W_MIDNUMLET))) {
				/* WB6/7, WB11/12: a letter/number on both sides */
				size_t q = p + cl2, cl3;
				int c3;
				while (q < len &&
				       (c3 = word_class_at(s, len, q, &cl3)) == W_EXTEND) {
					q += cl3;
					add++;
				}
				if (q < len) {
					c3 = word_class_at(s, len, q, &cl3);
					if (c3 == last) {
						take = q + cl3 - p;
						add++;
					}
				}
			}
			if (take == 0 || ncp + add > max_len)
				break;
			for (size_t i = p; i < p + take; i++)
				nonascii |= s[i] >= 0x80;
			alnum |= next == W_LETTER || next == W_NUM || next == W_KATA;
			ncp += add;
			last = next;
			p += take;
		}
		if (alnum)
			emit(st, start, p, nonascii);
	}
}

static bool
is_space_cp(int32_t c)
{
	if (c == 0x00A0 || c == 0x2007 || c == 0x202F) /* Java: non-breaking is not space */
		return false;
	utf8proc_category_t cat = utf8proc_category(c);
	return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL ||
	       cat == UTF8PROC_CATEGORY_ZP;
}

/* whitespace: runs of non-space; simple: runs of letters (with marks). */
static void
tokenize_runs(an_state *st, size_t len, bool letters)
{
	const uint8_t *s = st->text;
	const uint32_t max_len = st->max_len;
	size_t p = 0;
	while (p < len && !st->stopped) {
		size_t start = p;
		uint32_t ncp = 0;
		bool nonascii = false;
		while (p < len && ncp < max_len) {
			size_t cl = 1;
			bool in;
			if (s[p] < 0x80) {
				in = letters ? ascii_word_class[s[p]] == W_LETTER
				             : !ascii_space[s[p]];
			} else {
				int32_t c = utf8_decode(s + p, len - p, &cl);
				if (c < 0) {
					in = false;
				} else if (letters) {
					utf8proc_category_t cat = utf8proc_category(c);
					in = (cat >= UTF8PROC_CATEGORY_LU &&
					      cat <= UTF8PROC_CATEGORY_LO) ||
					     (ncp > 0 && cat >= UTF8PROC_CATEGORY_MN &&
					      cat <= UTF8PROC_CATEGORY_ME);
				} else {
					in = !is_space_cp(c);
				}
				nonascii |= in;
			}
			if (!in) {
				if (ncp == 0) {
					start = p + cl;
					p += cl;
					continue;
				}
				break;
			}
			p += cl;
			ncp++;
		}
		if (ncp > 0)
			emit(st, start, p, nonascii);
	}
}

cm_err
st_analyze(st_analyzer_kind a, const char *text, size_t len, uint32_t first_pos, st_token_fn fn,
           void *ctx, uint32_t *next_pos)
{
	if (text == NULL && len > 0)
		return CM_EINVAL;
	if (len > UINT32_MAX) /* offsets are 32-bit */
		return CM_ELIMIT;
	an_state state; /* ~8 KB of scratch: on the stack, not malloc per value */
	an_state *st = &state;
	st->kind = a;
	st->text = (const uint8_t *)text;
	st->fn = fn;
	st->ctx = ctx;
	st->pos = first_pos;
	st->stopped = false;
	st->err = CM_OK;
	st->stemmer = NULL;
	st->max_len = ST_MAX_TOKEN_LEN;
	if (a == ST_AN_ENGLISH && (st->stemmer = stemmer_get()) == NULL)
		return CM_ENOMEM;
	switch (a) {
	case ST_AN_STANDARD:
	case ST_AN_ENGLISH:
		tokenize_standard(st, len);
		break;
	case ST_AN_SIMPLE:
		tokenize_runs(st, len, true);
		break;
	case ST_AN_WHITESPACE:
		tokenize_runs(st, len, false);
		break;
	case ST_AN_KEYWORD:
		if (len > 0)
			emit(st, 0, len, false);
		break;
	default:
		return CM_EINVAL;
	}
	if (next_pos != NULL)
		*next_pos = st->pos;
	return st->err;
}

void
an_tokenize_raw(an_raw_tokenizer which, const char *text, size_t len, uint32_t max_len,
                an_raw_fn fn, void *ctx)
{
	an_state *st = cm_malloc(CM_MEM_STORAGE, sizeof(*st)); /* custom chains only */
	memset(st, 0, offsetof(an_state, term));
	st->kind = (st_analyzer_kind)AN_KIND_RAW;
	st->text = (const uint8_t *)text;
	st->max_len = max_len;
	st->raw = fn;
	st->raw_ctx = ctx;
	switch (which) {
	case AN_RAW_STANDARD:
		tokenize_standard(st, len);
		break;
	case AN_RAW_WHITESPACE:
		tokenize_runs(st, len, false);
		break;
	case AN_RAW_LETTER:
		tokenize_runs(st, len, true);
		break;
	}
	cm_free(CM_MEM_STORAGE, st);
}

const char *
an_standard_type(const char *text, size_t len)
{
	const uint8_t *s = (const uint8_t *)text;
	bool num = true;
	for (size_t p = 0; p < len;) {
		size_t cl;
		int32_t c = s[p] < 0x80 ? s[p] : utf8_decode(s + p, len - p, &cl);
		if (s[p] < 0x80)
			cl = 1;
		if (p == 0 && c >= 0x80) {
			if (is_hiragana(c))
				return "<HIRAGANA>";
			if (is_katakana(c))
				return "<KATAKANA>";
			if (is_han(c))
				return "<IDEOGRAPHIC>";
			if ((c >= 0xAC00 && c <= 0xD7A3) || (c >= 0x1100 && c <= 0x11FF) ||
			    (c >= 0x3130 && c <= 0x318F))
				return "<HANGUL>";
		}
		int w = c < 0 ? W_SEP : c < 0x80 ? ascii_word_class[c] : word_class_slow(c);
		if (w == W_LETTER || w == W_KATA || w == W_IDEO)
			num = false;
		p += cl;
	}
	return num ? "<NUM>" : "<ALPHANUM>";
}

int32_t
an_utf8_decode(const uint8_t *s, size_t n, size_t *len)
{
	return utf8_decode(s, n, len);
}

bool
an_is_space(int32_t c)
{
	return c < 0x80 ? ascii_space[c] != 0 : is_space_cp(c);
}
