/* Custom analysis chains (index settings "analysis"): char filters over
 * the whole value with an offset map back to the input, a tokenizer
 * into a token list, then each token filter rewriting the list.
 *
 * Only custom analyzers come here; the built-in analyzers keep their
 * allocation-free path in analysis.c. A chain allocates per value (the
 * token list, its term arena, the char-filtered text): that is the
 * price of composing stages, and ES pays it too. */
#include "an_chain.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <libstemmer.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <utf8proc.h>

#include "../common/cm_alloc.h"
#include "../common/cm_buf.h"
#include "an_private.h"

#define M CM_MEM_STORAGE
#define MAX_VALUE_TOKENS (1u << 20) /* ngrams of a huge value stop here */

/* ---- token lists ---- */

void
tks_init(tks *t)
{
	memset(t, 0, sizeof(*t));
	cm_buf_init(&t->arena, M);
}

void
tks_free(tks *t)
{
	cm_free(M, t->v);
	cm_buf_free(&t->arena);
	memset(t, 0, sizeof(*t));
}

void
tks_reset(tks *t)
{
	t->n = 0;
	cm_buf_reset(&t->arena);
}

/* Appends a token whose term is s[0..n); s may point into t's arena. */
tk *
tks_add(tks *t, const char *s, size_t n, uint32_t start, uint32_t end, uint32_t posinc,
        const char *type)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 32;
		t->v = cm_realloc(M, t->v, t->cap * sizeof(tk));
	}
	size_t off = t->arena.len;
	/* a term from this very arena moves when the arena grows */
	if (t->arena.data != NULL && s >= (const char *)t->arena.data &&
	    s < (const char *)t->arena.data + t->arena.len) {
		size_t from = (size_t)(s - (const char *)t->arena.data);
		cm_buf_reserve(&t->arena, n);
		memmove(t->arena.data + off, t->arena.data + from, n);
		t->arena.len += n;
	} else {
		cm_buf_put(&t->arena, s, n);
	}
	tk *k = &t->v[t->n++];
	k->off = (uint32_t)off;
	k->len = (uint32_t)n;
	k->start = start;
	k->end = end;
	k->posinc = posinc;
	k->type = type;
	k->keyword = false;
	return k;
}

static inline const char *
tk_term(const tks *t, const tk *k)
{
	return (const char *)t->arena.data + k->off;
}

/* ---- UTF-8 helpers ---- */

static size_t
cp_count(const char *s, size_t n)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		c += ((uint8_t)s[i] & 0xC0) != 0x80;
	return c;
}

/* Byte length of the first `cps` code points of s. */
static size_t
cp_prefix(const char *s, size_t n, size_t cps)
{
	size_t i = 0;
	while (i < n && cps > 0) {
		i++;
		while (i < n && ((uint8_t)s[i] & 0xC0) == 0x80)
			i++;
		cps--;
	}
	return i;
}

static int32_t
cp_at(const char *s, size_t n, size_t p, size_t *len)
{
	int32_t c = an_utf8_decode((const uint8_t *)s + p, n - p, len);
	return c < 0 ? 0xFFFD : c;
}

static void
put_cp(cm_buf *b, int32_t c)
{
	uint8_t u[4];
	utf8proc_ssize_t k = utf8proc_encode_char(c, u);
	cm_buf_put(b, u, (size_t)(k > 0 ? k : 0));
}

/* ---- the stemmer cache: sb_stemmer is not thread-safe, so each thread
 * keeps one per algorithm, freed when the thread exits ---- */

#define STEMMER_SLOTS 8
typedef struct {
	const char *alg[STEMMER_SLOTS];
	struct sb_stemmer *st[STEMMER_SLOTS];
} stemmer_cache;

static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static _Thread_local stemmer_cache *thread_cache;

static void
cache_destroy(void *p)
{
	stemmer_cache *c = p;
	for (int i = 0; i < STEMMER_SLOTS; i++)
		if (c->st[i])
			sb_stemmer_delete(c->st[i]);
	cm_free(M, c);
}

static void
cache_key_init(void)
{
	pthread_key_create(&cache_key, cache_destroy);
}

/* alg must be a string with static lifetime (from the filter definition
 * table, which lives as long as the analysis). */
static struct sb_stemmer *
stemmer_for(const char *alg)
{
	if (thread_cache == NULL) {
		pthread_once(&cache_once, cache_key_init);
		thread_cache = cm_calloc(M, 1, sizeof(*thread_cache));
		if (thread_cache == NULL)
			return NULL;
		pthread_setspecific(cache_key, thread_cache);
	}
	stemmer_cache *c = thread_cache;
	int i;
	for (i = 0; i < STEMMER_SLOTS && c->alg[i]; i++)
		if (strcmp(c->alg[i], alg) == 0)
			return c->st[i];
	if (i == STEMMER_SLOTS) { /* full: drop the last slot */
		i = STEMMER_SLOTS - 1;
		sb_stemmer_delete(c->st[i]);
	}
	c->alg[i] = alg;
	c->st[i] = sb_stemmer_new(alg, NULL);
	return c->st[i];
}

bool
an_stemmer_exists(const char *alg)
{
	struct sb_stemmer *s = sb_stemmer_new(alg, NULL);
	if (s == NULL)
		return false;
	sb_stemmer_delete(s);
	return true;
}

/* ---- char filters: text -> text with an offset map ---- */

/* For output byte i: smap[i] is the input offset it starts at, emap[i]
 * the input offset just after what produced it. */
typedef struct cftext {
	cm_buf text;
	uint32_t *smap, *emap;
	size_t cap;
} cftext;

static void
cft_put(cftext *o, const char *s, size_t n, uint32_t in_start, uint32_t in_end)
{
	if (o->text.len + n > o->cap) {
		size_t c = o->cap ? o->cap * 2 : 256;
		while (c < o->text.len + n)
			c *= 2;
		o->smap = cm_realloc(M, o->smap, c * sizeof(uint32_t));
		o->emap = cm_realloc(M, o->emap, c * sizeof(uint32_t));
		o->cap = c;
	}
	for (size_t i = 0; i < n; i++) {
		o->smap[o->text.len + i] = in_start;
		o->emap[o->text.len + i] = in_end;
	}
	/* a copied run maps byte for byte */
	if (n == (size_t)(in_end - in_start) && n > 1)
		for (size_t i = 0; i < n; i++) {
			o->smap[o->text.len + i] = in_start + (uint32_t)i;
			o->emap[o->text.len + i] = in_start + (uint32_t)i + 1;
		}
	cm_buf_put(&o->text, s, n);
}

static void
cft_free(cftext *o)
{
	cm_buf_free(&o->text);
	cm_free(M, o->smap);
	cm_free(M, o->emap);
	memset(o, 0, sizeof(*o));
}

static const char *const html_blocks[] = {
    "address",  "article",    "aside",  "blockquote", "br",   "dd",   "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer",     "form", "h1",   "h2",  "h3", "h4",
    "h5",       "h6",         "header", "hr",         "li",   "main", "nav", "ol", "p",
    "pre",      "section",    "table",  "td",         "th",   "tr",   "ul",
};

static bool
tag_in(const char *name, size_t n, char *const *list, size_t nl)
{
	for (size_t i = 0; i < nl; i++)
		if (strlen(list[i]) == n && strncasecmp(list[i], name, n) == 0)
			return true;
	return false;
}

static bool
html_block(const char *name, size_t n)
{
	return tag_in(name, n, (char *const *)html_blocks,
	              sizeof(html_blocks) / sizeof(*html_blocks));
}

/* An entity at s[0] == '&': its code point and length, or 0. */
static size_t
html_entity(const char *s, size_t n, int32_t *cp)
{
	static const struct {
		const char *name;
		int32_t cp;
	} named[] = {{"amp", '&'},       {"lt", '<'},       {"gt", '>'},      {"quot", '"'},
	             {"apos", '\''},     {"nbsp", 0xA0},    {"copy", 0xA9},   {"reg", 0xAE},
	             {"eacute", 0xE9},   {"egrave", 0xE8},  {"agrave", 0xE0}, {"uuml", 0xFC},
	             {"ouml", 0xF6},     {"auml", 0xE4},    {"szlig", 0xDF},  {"ccedil", 0xE7},
	             {"hellip", 0x2026}, {"mdash", 0x2014}, {"ndash", 0x2013}};
	size_t e = 1;
	while (e < n && e < 12 && s[e] != ';')
		e++;
	if (e >= n || s[e] != ';' || e < 2)
		return 0;
	if (s[1] == '#') {
		char *end;
		long v =
		    s[2] == 'x' || s[2] == 'X' ? strtol(s + 3, &end, 16) : strtol(s + 2, &end, 10);
		if (end != s + e || v <= 0 || v > 0x10FFFF)
			return 0;
		*cp = (int32_t)v;
		return e + 1;
	}
	for (size_t i = 0; i < sizeof(named) / sizeof(*named); i++)
		if (strlen(named[i].name) == e - 1 && memcmp(named[i].name, s + 1, e - 1) == 0) {
			*cp = named[i].cp;
			return e + 1;
		}
	return 0;
}

static void
cf_html_strip(const cf_def *d, const char *s, size_t n, cftext *o)
{
	size_t p = 0;
	while (p < n) {
		if (s[p] == '&') {
			int32_t cp;
			size_t el = html_entity(s + p, n - p, &cp);
			if (el) {
				cm_buf b;
				cm_buf_init(&b, M);
				put_cp(&b, cp);
				cft_put(o, (const char *)b.data, b.len, (uint32_t)p,
				        (uint32_t)(p + el));
				cm_buf_free(&b);
				p += el;
				continue;
			}
		}
		if (s[p] == '<' && p + 1 < n) {
			if (n - p >= 4 && memcmp(s + p, "<!--", 4) == 0) {
				size_t e = p + 4;
				while (e + 3 <= n && memcmp(s + e, "-->", 3) != 0)
					e++;
				p = e + 3 <= n ? e + 3 : n;
				continue;
			}
			size_t q = p + 1;
			bool closing = s[q] == '/';
			if (closing)
				q++;
			size_t ns = q;
			while (q < n &&
			       (isalnum((unsigned char)s[q]) || s[q] == '-' || s[q] == ':'))
				q++;
			if (q > ns || s[p + 1] == '!' || s[p + 1] == '?') {
				const char *gt = memchr(s + q, '>', n - q);
				if (gt != NULL) {
					size_t name_len = q - ns;
					size_t end = (size_t)(gt - s) + 1;
					if (tag_in(s + ns, name_len, d->escaped_tags,
					           d->nescaped_tags)) {
						cft_put(o, s + p, end - p, (uint32_t)p,
						        (uint32_t)end);
						p = end;
						continue;
					}
					/* script and style lose their contents too */
					if (!closing && name_len > 0 &&
					    ((name_len == 6 &&
					      strncasecmp(s + ns, "script", 6) == 0) ||
					     (name_len == 5 &&
					      strncasecmp(s + ns, "style", 5) == 0))) {
						char close[10];
						snprintf(close, sizeof(close), "</%.*s",
						         (int)name_len, s + ns);
						size_t k = end;
						while (k + name_len + 2 <= n &&
						       strncasecmp(s + k, close, name_len + 2) != 0)
							k++;
						const char *g2 =
						    k < n ? memchr(s + k, '>', n - k) : NULL;
						end = g2 ? (size_t)(g2 - s) + 1 : n;
					}
					if (name_len > 0 && html_block(s + ns, name_len))
						cft_put(o, "\n", 1, (uint32_t)p, (uint32_t)end);
					p = end;
					continue;
				}
			}
		}
		size_t r = p + 1;
		while (r < n && s[r] != '<' && s[r] != '&')
			r++;
		cft_put(o, s + p, r - p, (uint32_t)p, (uint32_t)r);
		p = r;
	}
}

static void
cf_mapping(const cf_def *d, const char *s, size_t n, cftext *o)
{
	size_t p = 0, lit = 0;
	while (p < n) {
		size_t best = 0, bl = 0;
		for (size_t i = 0; i < d->nmap; i++) {
			size_t kl = strlen(d->map_from[i]);
			if (kl > bl && kl <= n - p && memcmp(s + p, d->map_from[i], kl) == 0) {
				best = i;
				bl = kl;
			}
		}
		if (bl == 0) {
			p++;
			continue;
		}
		if (p > lit)
			cft_put(o, s + lit, p - lit, (uint32_t)lit, (uint32_t)p);
		cft_put(o, d->map_to[best], strlen(d->map_to[best]), (uint32_t)p,
		        (uint32_t)(p + bl));
		p += bl;
		lit = p;
	}
	if (n > lit)
		cft_put(o, s + lit, n - lit, (uint32_t)lit, (uint32_t)n);
}

static void pattern_replace_text(const cf_def *d, const char *s, size_t n, bool all, cftext *o);

static void
cf_pattern_replace(const cf_def *d, const char *s, size_t n, cftext *o)
{
	pattern_replace_text(d, s, n, true, o);
}

static void
pattern_replace_text(const cf_def *d, const char *s, size_t n, bool all, cftext *o)
{
	char *z = cm_strndup(M, s, n); /* regexec wants a NUL-terminated string */
	size_t p = 0;
	regmatch_t mt[10];
	while (p <= n) {
		if (regexec(&d->re, z + p, 10, mt, p > 0 ? REG_NOTBOL : 0) != 0)
			break;
		size_t ms = p + (size_t)mt[0].rm_so, me = p + (size_t)mt[0].rm_eo;
		if (ms > p)
			cft_put(o, s + p, ms - p, (uint32_t)p, (uint32_t)ms);
		cm_buf rep;
		cm_buf_init(&rep, M);
		for (const char *r = d->replacement; *r; r++) {
			if (*r == '$' && r[1] >= '0' && r[1] <= '9') {
				int g = r[1] - '0';
				if (mt[g].rm_so >= 0)
					cm_buf_put(&rep, z + p + mt[g].rm_so,
					           (size_t)(mt[g].rm_eo - mt[g].rm_so));
				r++;
			} else if (*r == '\\' && r[1]) {
				cm_buf_put(&rep, r + 1, 1);
				r++;
			} else {
				cm_buf_put(&rep, r, 1);
			}
		}
		cft_put(o, (const char *)rep.data, rep.len, (uint32_t)ms, (uint32_t)me);
		cm_buf_free(&rep);
		if (!all) {
			p = me;
			break;
		}
		if (me == ms) { /* an empty match: step over one character */
			if (ms >= n)
				break;
			size_t cl;
			cp_at(s, n, ms, &cl);
			cft_put(o, s + ms, cl, (uint32_t)ms, (uint32_t)(ms + cl));
			me = ms + cl;
		}
		p = me;
	}
	if (p < n)
		cft_put(o, s + p, n - p, (uint32_t)p, (uint32_t)n);
	cm_free(M, z);
}

/* Runs the char filters; *out holds the final text and a map onto the
 * original input. Returns false when there are none (use the input). */
static bool
run_char_filters(const st_analyzer *an, const char *s, size_t n, cftext *out)
{
	if (an->ncf == 0)
		return false;
	cftext cur = {0};
	cm_buf_init(&cur.text, M);
	for (size_t i = 0; i < an->ncf; i++) {
		const cf_def *d = an->cf[i];
		cftext nx = {0};
		cm_buf_init(&nx.text, M);
		/* an empty output has no buffer yet */
		const char *in = i == 0 ? s : cur.text.data ? (const char *)cur.text.data : "";
		size_t inn = i == 0 ? n : cur.text.len;
		switch (d->kind) {
		case CF_HTML_STRIP:
			cf_html_strip(d, in, inn, &nx);
			break;
		case CF_MAPPING:
			cf_mapping(d, in, inn, &nx);
			break;
		case CF_PATTERN_REPLACE:
			cf_pattern_replace(d, in, inn, &nx);
			break;
		}
		if (i > 0) { /* compose with the previous map */
			for (size_t k = 0; k < nx.text.len; k++) {
				uint32_t a = nx.smap[k], b = nx.emap[k];
				nx.smap[k] = a < cur.text.len ? cur.smap[a] : (uint32_t)n;
				nx.emap[k] =
				    b > 0 && b - 1 < cur.text.len ? cur.emap[b - 1] : nx.smap[k];
			}
			cft_free(&cur);
		}
		cur = nx;
	}
	*out = cur;
	return true;
}

/* ---- tokenizers ---- */

typedef struct rawctx {
	tks *out;
	const char *text;
	const tok_def *td;
	bool first;
} rawctx;

static void
raw_token(void *ctx, size_t start, size_t end)
{
	rawctx *r = ctx;
	const char *type =
	    r->td->kind == TK_STANDARD ? an_standard_type(r->text + start, end - start) : "word";
	if (r->td->kind == TK_LOWERCASE) {
		tk *k = tks_add(r->out, "", 0, (uint32_t)start, (uint32_t)end, 1, type);
		size_t off = r->out->arena.len;
		for (size_t p = start; p < end;) {
			size_t cl;
			int32_t c = cp_at(r->text, end, p, &cl);
			put_cp(&r->out->arena, utf8proc_tolower(c));
			p += cl;
		}
		k->off = (uint32_t)off;
		k->len = (uint32_t)(r->out->arena.len - off);
		return;
	}
	tks_add(r->out, r->text + start, end - start, (uint32_t)start, (uint32_t)end, 1, type);
}

static bool
char_in_classes(int32_t c, unsigned classes, const char *custom)
{
	if (c < 0)
		return false;
	utf8proc_category_t cat = utf8proc_category(c);
	if ((classes & TC_LETTER) && cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO)
		return true;
	if ((classes & TC_DIGIT) && cat == UTF8PROC_CATEGORY_ND)
		return true;
	if ((classes & TC_WHITESPACE) && an_is_space(c))
		return true;
	if ((classes & TC_PUNCTUATION) && cat >= UTF8PROC_CATEGORY_PC &&
	    cat <= UTF8PROC_CATEGORY_PO)
		return true;
	if ((classes & TC_SYMBOL) && cat >= UTF8PROC_CATEGORY_SM && cat <= UTF8PROC_CATEGORY_SO)
		return true;
	if ((classes & TC_CUSTOM) && custom != NULL && c < 0x80 && strchr(custom, (int)c))
		return true;
	return false;
}

/* Lucene's NGramTokenizer: for each start, grams min..max (code points)
 * within runs of token_chars (the whole text when none are given);
 * edge: only from the run's start. Every gram advances the position. */
static void
tok_ngram(const tok_def *d, const char *s, size_t n, tks *out)
{
	size_t p = 0;
	while (p < n) {
		size_t rs = p, re = p;
		if (d->token_chars) {
			size_t cl;
			while (rs < n && !char_in_classes(cp_at(s, n, rs, &cl), d->token_chars,
			                                  d->custom_chars))
				rs += cl;
			re = rs;
			while (re < n && char_in_classes(cp_at(s, n, re, &cl), d->token_chars,
			                                 d->custom_chars))
				re += cl;
		} else {
			re = n;
		}
		if (rs >= n)
			break;
		size_t ncp = cp_count(s + rs, re - rs);
		for (size_t start = rs, si = 0; start < re && out->n < MAX_VALUE_TOKENS; si++) {
			for (int g = d->min_gram; g <= d->max_gram && si + (size_t)g <= ncp; g++) {
				size_t bl = cp_prefix(s + start, re - start, (size_t)g);
				tks_add(out, s + start, bl, (uint32_t)start, (uint32_t)(start + bl),
				        1, "word");
			}
			if (d->kind == TK_EDGE_NGRAM)
				break;
			size_t cl;
			cp_at(s, re, start, &cl);
			start += cl;
		}
		p = re > rs ? re : rs + 1;
	}
}

static void
tok_pattern(const tok_def *d, const char *s, size_t n, tks *out)
{
	char *z = cm_strndup(M, s, n);
	regmatch_t mt[10];
	size_t p = 0, last = 0;
	while (p <= n && out->n < MAX_VALUE_TOKENS) {
		if (regexec(&d->re, z + p, 10, mt, p > 0 ? REG_NOTBOL : 0) != 0)
			break;
		size_t ms = p + (size_t)mt[0].rm_so, me = p + (size_t)mt[0].rm_eo;
		if (d->group < 0) {
			if (ms > last)
				tks_add(out, s + last, ms - last, (uint32_t)last, (uint32_t)ms, 1,
				        "word");
			last = me;
		} else if (mt[d->group].rm_so >= 0 && mt[d->group].rm_eo > mt[d->group].rm_so) {
			size_t gs = p + (size_t)mt[d->group].rm_so,
			       ge = p + (size_t)mt[d->group].rm_eo;
			tks_add(out, s + gs, ge - gs, (uint32_t)gs, (uint32_t)ge, 1, "word");
		}
		if (me == ms) {
			if (ms >= n)
				break;
			size_t cl;
			cp_at(s, n, ms, &cl);
			me = ms + cl;
		}
		p = me;
	}
	if (d->group < 0 && n > last)
		tks_add(out, s + last, n - last, (uint32_t)last, (uint32_t)n, 1, "word");
	cm_free(M, z);
}

/* char_group: runs of characters that are none of the split classes or
 * listed characters. */
static void
tok_char_group(const tok_def *d, const char *s, size_t n, tks *out)
{
	size_t p = 0, start = 0, ncp = 0;
	while (p <= n) {
		size_t cl = 1;
		bool split = p == n;
		if (!split) {
			int32_t c = cp_at(s, n, p, &cl);
			split = char_in_classes(c, d->token_chars, NULL);
			for (size_t i = 0; i < d->nsplit_on && !split; i++)
				split = strlen(d->split_on[i]) == cl &&
				        !memcmp(d->split_on[i], s + p, cl);
		}
		if (!split && ncp >= (size_t)d->max_token_length) {
			tks_add(out, s + start, p - start, (uint32_t)start, (uint32_t)p, 1, "word");
			start = p;
			ncp = 0;
		}
		if (split) {
			if (p > start)
				tks_add(out, s + start, p - start, (uint32_t)start, (uint32_t)p, 1,
				        "word");
			start = p + cl;
			ncp = 0;
		} else {
			ncp++;
		}
		if (p == n)
			break;
		p += cl;
	}
}

/* path_hierarchy: "/a/b/c" -> "/a", "/a/b", "/a/b/c", all at one
 * position; `skip` leading parts are left out. */
static void
tok_path(const tok_def *d, const char *s, size_t n, tks *out)
{
	size_t dl = strlen(d->delimiter), rl = strlen(d->replacement);
	size_t p = 0, level = 0, start = 0;
	cm_buf b;
	cm_buf_init(&b, M);
	bool first = true;
	while (p <= n) {
		bool at_delim = p < n && n - p >= dl && !memcmp(s + p, d->delimiter, dl);
		if ((at_delim && p > 0) || p == n) {
			/* a part ends at p */
			if ((int)level >= d->skip && p > start) {
				size_t from = b.len;
				(void)from;
				tks_add(out, (const char *)b.data, b.len, (uint32_t)start,
				        (uint32_t)p, first ? 1 : 0, "word");
				first = false;
			}
			level++;
			if ((int)level == d->skip) {
				start = p;
				cm_buf_reset(&b);
			}
			if (p == n)
				break;
		}
		if (at_delim) {
			if ((int)level >= d->skip)
				cm_buf_put(&b, d->replacement, rl);
			p += dl;
			continue;
		}
		if ((int)level >= d->skip)
			cm_buf_put(&b, s + p, 1);
		p++;
	}
	cm_buf_free(&b);
}

static void
run_tokenizer(const tok_def *d, const char *s, size_t n, tks *out)
{
	rawctx r = {out, s, d, true};
	switch (d->kind) {
	case TK_STANDARD:
		an_tokenize_raw(AN_RAW_STANDARD, s, n, (uint32_t)d->max_token_length, raw_token,
		                &r);
		break;
	case TK_WHITESPACE:
		an_tokenize_raw(AN_RAW_WHITESPACE, s, n, (uint32_t)d->max_token_length, raw_token,
		                &r);
		break;
	case TK_LETTER:
	case TK_LOWERCASE:
		an_tokenize_raw(AN_RAW_LETTER, s, n, (uint32_t)d->max_token_length, raw_token, &r);
		break;
	case TK_KEYWORD:
		if (n > 0)
			tks_add(out, s, n, 0, (uint32_t)n, 1, "word");
		break;
	case TK_PATTERN:
		tok_pattern(d, s, n, out);
		break;
	case TK_NGRAM:
	case TK_EDGE_NGRAM:
		tok_ngram(d, s, n, out);
		break;
	case TK_CHAR_GROUP:
		tok_char_group(d, s, n, out);
		break;
	case TK_PATH_HIERARCHY:
		tok_path(d, s, n, out);
		break;
	}
}

/* ---- token filters ---- */

static void
map_case(const char *s, size_t n, bool upper, cm_buf *b)
{
	for (size_t p = 0; p < n;) {
		uint8_t c = (uint8_t)s[p];
		if (c < 0x80) {
			char x = (char)(upper ? (c >= 'a' && c <= 'z' ? c - 32 : c)
			                      : (c >= 'A' && c <= 'Z' ? c + 32 : c));
			cm_buf_put(b, &x, 1);
			p++;
			continue;
		}
		size_t cl;
		int32_t cp = cp_at(s, n, p, &cl);
		put_cp(b, upper ? utf8proc_toupper(cp) : utf8proc_tolower(cp));
		p += cl;
	}
}

/* Folds to ASCII where a base letter exists: compatibility decomposition
 * with marks stripped, then the letters that do not decompose. */
static void
ascii_fold(const char *s, size_t n, cm_buf *b)
{
	static const struct {
		int32_t cp;
		const char *to;
	} extra[] = {{0xDF, "ss"},  {0xC6, "AE"},  {0xE6, "ae"},  {0xD8, "O"},    {0xF8, "o"},
	             {0x152, "OE"}, {0x153, "oe"}, {0x141, "L"},  {0x142, "l"},   {0x110, "D"},
	             {0x111, "d"},  {0xDE, "TH"},  {0xFE, "th"},  {0x131, "i"},   {0xD0, "D"},
	             {0xF0, "d"},   {0x2018, "'"}, {0x2019, "'"}, {0x201C, "\""}, {0x201D, "\""},
	             {0x2013, "-"}, {0x2014, "-"}};
	for (size_t p = 0; p < n;) {
		if ((uint8_t)s[p] < 0x80) {
			cm_buf_put(b, s + p, 1);
			p++;
			continue;
		}
		size_t cl;
		int32_t cp = cp_at(s, n, p, &cl);
		const char *rep = NULL;
		for (size_t i = 0; i < sizeof(extra) / sizeof(*extra); i++)
			if (extra[i].cp == cp)
				rep = extra[i].to;
		if (rep != NULL) {
			cm_buf_put(b, rep, strlen(rep));
		} else {
			utf8proc_int32_t d[18];
			utf8proc_ssize_t k = utf8proc_decompose_char(
			    cp, d, 18, UTF8PROC_COMPAT | UTF8PROC_DECOMPOSE | UTF8PROC_STRIPMARK,
			    NULL);
			bool ascii = k > 0 && k <= 18;
			for (utf8proc_ssize_t i = 0; ascii && i < k; i++)
				ascii = d[i] < 0x80;
			if (ascii)
				for (utf8proc_ssize_t i = 0; i < k; i++)
					put_cp(b, d[i]);
			else
				cm_buf_put(b, s + p, cl);
		}
		p += cl;
	}
}

static bool
stop_has(const filter_def *d, const char *t, size_t n)
{
	for (size_t i = 0; i < d->nwords; i++) {
		size_t wl = strlen(d->words[i]);
		if (wl == n && (d->ignore_case ? strncasecmp(d->words[i], t, n) == 0
		                               : memcmp(d->words[i], t, n) == 0))
			return true;
	}
	return false;
}

/* Lucene FilteringTokenFilter: a dropped token's position increment
 * moves to the next kept one. */
typedef struct {
	uint32_t carry;
} gapper;

static tk *
keep(gapper *g, tks *out, const tks *in, const tk *k)
{
	tk *o =
	    tks_add(out, tk_term(in, k), k->len, k->start, k->end, k->posinc + g->carry, k->type);
	o->keyword = k->keyword;
	g->carry = 0;
	return o;
}

static void
drop(gapper *g, const tk *k)
{
	g->carry += k->posinc;
}

static void
add_mapped(tks *out, const tks *in, const tk *k, cm_buf *tmp, uint32_t posinc)
{
	tk *o = tks_add(out, (const char *)tmp->data, tmp->len, k->start, k->end, posinc, k->type);
	o->keyword = k->keyword;
	(void)in;
}

static void
f_stem(const filter_def *d, const tks *in, tks *out)
{
	for (size_t i = 0; i < in->n; i++) {
		const tk *k = &in->v[i];
		const char *t = tk_term(in, k);
		size_t n = k->len;
		if (d->possessive) {
			if (n >= 2 && (t[n - 1] == 's' || t[n - 1] == 'S')) {
				if (t[n - 2] == '\'')
					n -= 2;
				else if (n >= 4 && memcmp(t + n - 4, "\xE2\x80\x99", 3) == 0)
					n -= 4;
			}
			tk *o = tks_add(out, t, n, k->start, k->end, k->posinc, k->type);
			o->keyword = k->keyword;
			continue;
		}
		struct sb_stemmer *st = k->keyword ? NULL : stemmer_for(d->stem_alg);
		const sb_symbol *r = st ? sb_stemmer_stem(st, (const sb_symbol *)t, (int)n) : NULL;
		if (r != NULL) {
			t = (const char *)r;
			n = (size_t)sb_stemmer_length(st);
		}
		tk *o = tks_add(out, t, n, k->start, k->end, k->posinc, k->type);
		o->keyword = k->keyword;
	}
}

/* Synonyms: the longest rule left side matching at each token (terms of
 * consecutive tokens); the originals stay when the rule keeps them, and
 * each alternative's j-th term sits at the match's j-th position. */
static void
f_synonym(const syn_map *sm, const tks *in, tks *out)
{
	size_t i = 0;
	while (i < in->n) {
		const syn_rule *best = NULL;
		size_t bl = 0;
		for (size_t r = 0; r < sm->nrules; r++) {
			const syn_rule *ru = &sm->rules[r];
			size_t L = ru->lhs.n;
			if (L <= bl || i + L > in->n)
				continue;
			bool ok = true;
			for (size_t j = 0; j < L && ok; j++) {
				const tk *a = &in->v[i + j], *b = &ru->lhs.v[j];
				ok = a->len == b->len && (j == 0 || a->posinc == 1) &&
				     memcmp(tk_term(in, a), tk_term(&ru->lhs, b), a->len) == 0;
			}
			if (ok) {
				best = ru;
				bl = L;
			}
		}
		if (best == NULL) {
			tk *o = tks_add(out, tk_term(in, &in->v[i]), in->v[i].len, in->v[i].start,
			                in->v[i].end, in->v[i].posinc, in->v[i].type);
			o->keyword = in->v[i].keyword;
			i++;
			continue;
		}
		uint32_t ms = in->v[i].start, me = in->v[i + bl - 1].end;
		size_t maxlen = bl;
		for (size_t a = 0; a < best->nalts; a++)
			if (best->alts[a].n > maxlen)
				maxlen = best->alts[a].n;
		for (size_t j = 0; j < maxlen; j++) {
			bool first_here = true;
			uint32_t inc = j == 0 ? in->v[i].posinc : 1;
			if (best->keep_orig && j < bl) {
				const tk *k = &in->v[i + j];
				tks_add(out, tk_term(in, k), k->len, k->start, k->end, inc,
				        k->type);
				first_here = false;
			}
			for (size_t a = 0; a < best->nalts; a++) {
				const tks *alt = &best->alts[a];
				if (j >= alt->n)
					continue;
				const tk *k = &alt->v[j];
				tks_add(out, tk_term(alt, k), k->len, ms, me, first_here ? inc : 0,
				        "SYNONYM");
				first_here = false;
			}
		}
		i += bl;
	}
}

/* word_delimiter_graph: parts split on case changes, letter/digit
 * changes and delimiters; catenations at the first part's position. */
typedef struct {
	size_t s, e; /* byte range within the token */
	bool digit;
} wd_part;

static int
wd_class(int32_t c)
{
	utf8proc_category_t cat = utf8proc_category(c);
	if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT)
		return 1; /* upper */
	if (cat >= UTF8PROC_CATEGORY_LL && cat <= UTF8PROC_CATEGORY_LO)
		return 2; /* lower/other letter */
	if (cat == UTF8PROC_CATEGORY_ND)
		return 3;
	return 0;
}

static void
f_word_delimiter(const filter_def *d, const tks *in, tks *out)
{
	wd_part parts[256];
	cm_buf cat;
	cm_buf_init(&cat, M);
	for (size_t i = 0; i < in->n; i++) {
		const tk *k = &in->v[i];
		const char *t = tk_term(in, k);
		size_t n = k->len, np = 0;
		if (k->keyword) {
			keep(&(gapper){0}, out, in, k);
			continue;
		}
		int prev = 0;
		size_t ps = 0;
		for (size_t p = 0; p <= n;) {
			size_t cl = 1;
			int c = p < n ? wd_class(cp_at(t, n, p, &cl)) : 0;
			bool split = false;
			if (prev != 0 && c != 0) {
				if (d->split_on_case_change && prev == 2 && c == 1)
					split = true;
				if (d->split_on_numerics && ((prev == 3) != (c == 3)))
					split = true;
			}
			/* english possessive: an "s" right after an apostrophe that ends a part */
			bool poss = d->stem_english_possessive && p - ps == 1 && ps >= 2 &&
			            (t[ps] == 's' || t[ps] == 'S') && t[ps - 1] == '\'' && np > 0 &&
			            parts[np - 1].e == ps - 1;
			if ((c == 0 || split) && prev != 0 && np < 256 && !poss) {
				parts[np].s = ps;
				parts[np].e = p;
				parts[np].digit = prev == 3;
				np++;
			}
			if (c != 0 && (prev == 0 || split))
				ps = p;
			prev = c;
			if (p == n)
				break;
			p += cl;
		}
		bool single = np == 1 && parts[0].s == 0 && parts[0].e == n;
		if (np == 0 || single) {
			if (np == 0 && !d->preserve_original) {
				drop(&(gapper){0}, k);
				continue;
			}
			keep(&(gapper){0}, out, in, k);
			continue;
		}
		uint32_t inc = k->posinc;
		bool first = true;
		if (d->preserve_original) {
			tks_add(out, t, n, k->start, k->end, inc, k->type);
			first = false;
		}
		/* catenations first at the first position, as the graph filter sorts them */
		for (int mode = 0; mode < 3; mode++) {
			bool on = mode == 0   ? d->catenate_all
			          : mode == 1 ? d->catenate_words
			                      : d->catenate_numbers;
			if (!on)
				continue;
			cm_buf_reset(&cat);
			size_t cnt = 0;
			for (size_t j = 0; j < np; j++) {
				if (mode == 1 && parts[j].digit)
					continue;
				if (mode == 2 && !parts[j].digit)
					continue;
				cm_buf_put(&cat, t + parts[j].s, parts[j].e - parts[j].s);
				cnt++;
			}
			if (cnt > 1 && (mode == 0 || cnt == np)) {
				tks_add(out, (const char *)cat.data, cat.len, k->start, k->end,
				        first ? inc : 0, k->type);
				first = false;
			}
		}
		for (size_t j = 0; j < np; j++) {
			bool on =
			    parts[j].digit ? d->generate_number_parts : d->generate_word_parts;
			if (!on)
				continue;
			uint32_t ps2 = k->start, pe2 = k->end;
			if (k->end - k->start == n) { /* offsets still match the term */
				ps2 = k->start + (uint32_t)parts[j].s;
				pe2 = k->start + (uint32_t)parts[j].e;
			}
			tks_add(out, t + parts[j].s, parts[j].e - parts[j].s, ps2, pe2,
			        first ? inc : (j == 0 ? 0 : 1), k->type);
			first = false;
		}
	}
	cm_buf_free(&cat);
}

static void
f_shingle(const filter_def *d, const tks *in, tks *out)
{
	cm_buf b;
	cm_buf_init(&b, M);
	for (size_t i = 0; i < in->n; i++) {
		const tk *k = &in->v[i];
		bool first = true;
		if (d->output_unigrams) {
			tks_add(out, tk_term(in, k), k->len, k->start, k->end, k->posinc, k->type);
			first = false;
		}
		for (int sz = d->min_shingle; sz <= d->max_shingle; sz++) {
			if (i + (size_t)sz > in->n)
				break;
			cm_buf_reset(&b);
			for (int j = 0; j < sz; j++) {
				const tk *x = &in->v[i + (size_t)j];
				if (j > 0) {
					cm_buf_put(&b, d->separator, strlen(d->separator));
					for (uint32_t g = 1; g < x->posinc; g++) {
						cm_buf_put(&b, d->filler, strlen(d->filler));
						cm_buf_put(&b, d->separator, strlen(d->separator));
					}
				}
				cm_buf_put(&b, tk_term(in, x), x->len);
			}
			tks_add(out, (const char *)b.data, b.len, k->start,
			        in->v[i + (size_t)sz - 1].end, first ? k->posinc : 0, "shingle");
			first = false;
		}
		if (first) /* no unigrams and no shingle from here: carry the position */
			if (i + 1 < in->n)
				((tks *)in)->v[i + 1].posinc += k->posinc;
	}
	cm_buf_free(&b);
}

static void
f_token_ngram(const filter_def *d, const tks *in, tks *out)
{
	for (size_t i = 0; i < in->n; i++) {
		const tk *k = &in->v[i];
		const char *t = tk_term(in, k);
		size_t ncp = cp_count(t, k->len);
		bool first = true;
		for (size_t s = 0, sb = 0; s < ncp; s++) {
			for (int g = d->min_gram; g <= d->max_gram && s + (size_t)g <= ncp; g++) {
				size_t bl = cp_prefix(t + sb, k->len - sb, (size_t)g);
				tks_add(out, t + sb, bl, k->start, k->end, first ? k->posinc : 0,
				        k->type);
				first = false;
			}
			if (d->kind == F_EDGE_NGRAM)
				break;
			sb += cp_prefix(t + sb, k->len - sb, 1);
		}
		if (d->preserve_original &&
		    (ncp < (size_t)d->min_gram || ncp > (size_t)d->max_gram)) {
			tks_add(out, t, k->len, k->start, k->end, first ? k->posinc : 0, k->type);
			first = false;
		}
		if (first && i + 1 < in->n) /* too short for any gram: the gap moves on */
			((tks *)in)->v[i + 1].posinc += k->posinc;
	}
}

/* Applies one filter from in to out (out is empty). Returns the
 * position increment of tokens dropped at the end. */
static uint32_t
run_filter(const filter_inst *fi, tks *in, tks *out)
{
	const filter_def *d = fi->def;
	gapper g = {0};
	cm_buf tmp;
	cm_buf_init(&tmp, M);
	switch (d->kind) {
	case F_LOWERCASE:
	case F_UPPERCASE:
		for (size_t i = 0; i < in->n; i++) {
			cm_buf_reset(&tmp);
			map_case(tk_term(in, &in->v[i]), in->v[i].len, d->kind == F_UPPERCASE,
			         &tmp);
			add_mapped(out, in, &in->v[i], &tmp, in->v[i].posinc);
		}
		break;
	case F_ASCIIFOLDING:
		for (size_t i = 0; i < in->n; i++) {
			const tk *k = &in->v[i];
			cm_buf_reset(&tmp);
			ascii_fold(tk_term(in, k), k->len, &tmp);
			add_mapped(out, in, k, &tmp, k->posinc);
			if (d->preserve_original &&
			    (tmp.len != k->len || memcmp(tmp.data, tk_term(in, k), k->len) != 0))
				tks_add(out, tk_term(in, k), k->len, k->start, k->end, 0, k->type);
		}
		break;
	case F_STOP:
		for (size_t i = 0; i < in->n; i++) {
			const tk *k = &in->v[i];
			bool last = i + 1 == in->n;
			if (stop_has(d, tk_term(in, k), k->len) && !(last && !d->remove_trailing))
				drop(&g, k);
			else
				keep(&g, out, in, k);
		}
		break;
	case F_STEMMER:
		f_stem(d, in, out);
		break;
	case F_SYNONYM:
		f_synonym(fi->syn, in, out);
		break;
	case F_LENGTH:
		for (size_t i = 0; i < in->n; i++) {
			size_t c = cp_count(tk_term(in, &in->v[i]), in->v[i].len);
			if (c < (size_t)d->min || c > (size_t)d->max)
				drop(&g, &in->v[i]);
			else
				keep(&g, out, in, &in->v[i]);
		}
		break;
	case F_TRIM:
		for (size_t i = 0; i < in->n; i++) {
			const tk *k = &in->v[i];
			const char *t = tk_term(in, k);
			size_t a = 0, b = k->len;
			while (a < b &&
			       (t[a] == ' ' || t[a] == '\t' || t[a] == '\n' || t[a] == '\r'))
				a++;
			while (b > a && (t[b - 1] == ' ' || t[b - 1] == '\t' || t[b - 1] == '\n' ||
			                 t[b - 1] == '\r'))
				b--;
			tks_add(out, t + a, b - a, k->start, k->end, k->posinc, k->type);
		}
		break;
	case F_UNIQUE: {
		size_t group = 0; /* first output token at the current position */
		for (size_t i = 0; i < in->n; i++) {
			const tk *k = &in->v[i];
			bool dup = false;
			if (d->only_on_same_position && k->posinc > 0)
				group = out->n;
			for (size_t j = d->only_on_same_position ? group : 0; j < out->n && !dup;
			     j++)
				dup = out->v[j].len == k->len &&
				      memcmp(tk_term(out, &out->v[j]), tk_term(in, k), k->len) == 0;
			if (!dup)
				tks_add(out, tk_term(in, k), k->len, k->start, k->end, k->posinc,
				        k->type);
		}
		break;
	}
	case F_TRUNCATE:
		for (size_t i = 0; i < in->n; i++) {
			const tk *k = &in->v[i];
			size_t bl = cp_prefix(tk_term(in, k), k->len, (size_t)d->length);
			tks_add(out, tk_term(in, k), bl, k->start, k->end, k->posinc, k->type);
		}
		break;
	case F_REVERSE:
		for (size_t i = 0; i < in->n; i++) {
			const tk *k = &in->v[i];
			const char *t = tk_term(in, k);
			cm_buf_reset(&tmp);
			cm_buf_reserve(&tmp, k->len);
			tmp.len = k->len;
			for (size_t p = 0; p < k->len;) {
				size_t cl = cp_prefix(t + p, k->len - p, 1);
				memcpy(tmp.data + k->len - p - cl, t + p, cl);
				p += cl;
			}
			add_mapped(out, in, k, &tmp, k->posinc);
		}
		break;
	case F_WORD_DELIMITER:
		f_word_delimiter(d, in, out);
		break;
	case F_SHINGLE:
		f_shingle(d, in, out);
		break;
	case F_NGRAM:
	case F_EDGE_NGRAM:
		f_token_ngram(d, in, out);
		break;
	case F_KEYWORD_MARKER:
		for (size_t i = 0; i < in->n; i++) {
			tk *o = keep(&g, out, in, &in->v[i]);
			o->keyword =
			    o->keyword || stop_has(d, tk_term(in, &in->v[i]), in->v[i].len);
		}
		break;
	case F_LIMIT:
		for (size_t i = 0; i < in->n && i < (size_t)d->max_count; i++)
			keep(&g, out, in, &in->v[i]);
		break;
	case F_KEEP:
	case F_KEEP_TYPES:
		for (size_t i = 0; i < in->n; i++) {
			const tk *k = &in->v[i];
			bool hit = false;
			if (d->kind == F_KEEP) {
				hit = stop_has(d, tk_term(in, k), k->len);
			} else {
				for (size_t w = 0; w < d->nwords && !hit; w++)
					hit = k->type && !strcmp(d->words[w], k->type);
				hit = hit != d->exclude;
			}
			if (hit)
				keep(&g, out, in, k);
			else
				drop(&g, k);
		}
		break;
	case F_ELISION:
	case F_APOSTROPHE:
		for (size_t i = 0; i < in->n; i++) {
			const tk *k = &in->v[i];
			const char *t = tk_term(in, k);
			size_t a = 0, b = k->len, q;
			/* the first ' or U+2019 */
			for (q = 0; q < k->len; q++)
				if (t[q] == '\'' ||
				    (q + 2 < k->len && !memcmp(t + q, "\xE2\x80\x99", 3)))
					break;
			if (q < k->len) {
				size_t ql = t[q] == '\'' ? 1 : 3;
				if (d->kind == F_APOSTROPHE)
					b = q;
				else if (stop_has(d, t, q))
					a = q + ql;
			}
			tk *o = tks_add(out, t + a, b - a, k->start, k->end, k->posinc, k->type);
			o->keyword = k->keyword;
		}
		break;
	case F_DECIMAL_DIGIT:
		for (size_t i = 0; i < in->n; i++) {
			const tk *k = &in->v[i];
			const char *t = tk_term(in, k);
			cm_buf_reset(&tmp);
			for (size_t p = 0; p < k->len;) {
				size_t cl;
				int32_t c = cp_at(t, k->len, p, &cl);
				if (c >= 0x80 && utf8proc_category(c) == UTF8PROC_CATEGORY_ND) {
					/* digits come in runs of ten from zero */
					int32_t z = c;
					while (z > 0 &&
					       utf8proc_category(z - 1) == UTF8PROC_CATEGORY_ND)
						z--;
					char dch = (char)('0' + (c - z) % 10);
					cm_buf_put(&tmp, &dch, 1);
				} else {
					cm_buf_put(&tmp, t + p, cl);
				}
				p += cl;
			}
			add_mapped(out, in, k, &tmp, k->posinc);
		}
		break;
	case F_PATTERN_REPLACE:
		for (size_t i = 0; i < in->n; i++) {
			const tk *k = &in->v[i];
			cftext cf = {0};
			cm_buf_init(&cf.text, M);
			cf_def tmpd = {.re = d->re, .replacement = d->replacement};
			pattern_replace_text(&tmpd, tk_term(in, k), k->len, d->replace_all, &cf);
			tk *o = tks_add(out, cf.text.len ? (const char *)cf.text.data : "",
			                cf.text.len, k->start, k->end, k->posinc, k->type);
			o->keyword = k->keyword;
			cft_free(&cf);
		}
		break;
	case F_FLATTEN_GRAPH: /* tokens here are already flat */
		for (size_t i = 0; i < in->n; i++)
			keep(&g, out, in, &in->v[i]);
		break;
	case F_REMOVE_DUPLICATES: {
		size_t group = 0;
		for (size_t i = 0; i < in->n; i++) {
			const tk *k = &in->v[i];
			bool dup = false;
			if (k->posinc > 0)
				group = out->n;
			for (size_t j = group; j < out->n && !dup; j++)
				dup = out->v[j].len == k->len &&
				      memcmp(tk_term(out, &out->v[j]), tk_term(in, k), k->len) == 0;
			if (!dup)
				keep(&g, out, in, k);
		}
		break;
	}
	case F_STEMMER_OVERRIDE:
		for (size_t i = 0; i < in->n; i++) {
			const tk *k = &in->v[i];
			const char *t = tk_term(in, k);
			size_t r;
			for (r = 0; r < d->nover; r++)
				if (strlen(d->over_from[r]) == k->len &&
				    !memcmp(d->over_from[r], t, k->len))
					break;
			if (r == d->nover || k->keyword) {
				keep(&g, out, in, k);
				continue;
			}
			tk *o = tks_add(out, d->over_to[r], strlen(d->over_to[r]), k->start, k->end,
			                k->posinc, k->type);
			o->keyword = true; /* the stemmers after it leave it */
		}
		break;
	case F_FINGERPRINT: {
		/* sorted distinct terms joined: one token for the whole value */
		if (in->n == 0)
			break;
		size_t *ix = cm_malloc(M, in->n * sizeof(size_t)), nu = 0;
		for (size_t i = 0; i < in->n; i++) {
			const char *t = tk_term(in, &in->v[i]);
			size_t pos = nu;
			bool dup = false;
			for (size_t j = 0; j < nu; j++) {
				const tk *o = &in->v[ix[j]];
				size_t m = o->len < in->v[i].len ? o->len : in->v[i].len;
				int c = memcmp(tk_term(in, o), t, m);
				if (c == 0)
					c = (o->len > in->v[i].len) - (o->len < in->v[i].len);
				if (c == 0) {
					dup = true;
					break;
				}
				if (c > 0) {
					pos = j;
					break;
				}
			}
			if (dup)
				continue;
			memmove(ix + pos + 1, ix + pos, (nu - pos) * sizeof(size_t));
			ix[pos] = i;
			nu++;
		}
		cm_buf_reset(&tmp);
		for (size_t j = 0; j < nu; j++) {
			if (j)
				cm_buf_put(&tmp, d->separator, strlen(d->separator));
			cm_buf_put(&tmp, tk_term(in, &in->v[ix[j]]), in->v[ix[j]].len);
		}
		if (cp_count((const char *)tmp.data, tmp.len) <= (size_t)d->max_count)
			tks_add(out, (const char *)tmp.data, tmp.len, in->v[0].start,
			        in->v[in->n - 1].end, 1, "fingerprint");
		cm_free(M, ix);
		break;
	}
	}
	cm_buf_free(&tmp);
	return g.carry;
}

/* Tokenizes and filters s[0..n) into *t (offsets into s). */
uint32_t
an_chain_tokens(const st_analyzer *an, const char *s, size_t n, size_t upto, tks *t)
{
	tks other;
	tks_init(&other);
	uint32_t trailing = 0;
	run_tokenizer(an->tok, s, n, t);
	for (size_t i = 0; i < an->nfilters && i < upto; i++) {
		tks_reset(&other);
		trailing += run_filter(&an->filters[i], t, &other);
		tks tmp = *t;
		*t = other;
		other = tmp;
	}
	tks_free(&other);
	return trailing;
}

static cm_err chain_run(const st_analyzer *an, const char *text, size_t len, uint32_t first_pos,
                        size_t upto, st_token_fn fn, void *ctx, uint32_t *next_pos);

cm_err
st_analyzer_run(const st_analyzer *an, const char *text, size_t len, uint32_t first_pos,
                st_token_fn fn, void *ctx, uint32_t *next_pos)
{
	if (an->builtin_kind >= 0)
		return st_analyze((st_analyzer_kind)an->builtin_kind, text, len, first_pos, fn, ctx,
		                  next_pos);
	return chain_run(an, text, len, first_pos, SIZE_MAX, fn, ctx, next_pos);
}

size_t
st_analyzer_stages(const st_analyzer *an, size_t *ncharfilters)
{
	*ncharfilters = an->builtin_kind >= 0 ? 0 : an->ncf;
	return an->builtin_kind >= 0 ? 0 : an->nfilters + 1;
}

const char *
st_analyzer_stage_name(const st_analyzer *an, bool charfilter, size_t i)
{
	if (charfilter)
		return an->cf[i]->name;
	return i == 0 ? an->tok->name : an->filters[i - 1].def->name;
}

cm_err
st_analyzer_run_stage(const st_analyzer *an, const char *text, size_t len, uint32_t first_pos,
                      size_t stage, st_token_fn fn, void *ctx, uint32_t *next_pos)
{
	return chain_run(an, text, len, first_pos, stage, fn, ctx, next_pos);
}

void
st_analyzer_char_filtered(const st_analyzer *an, const char *text, size_t len, size_t k,
                          cm_buf *out)
{
	st_analyzer tmp = *an;
	tmp.ncf = k + 1 < an->ncf ? k + 1 : an->ncf;
	cftext cf;
	if (run_char_filters(&tmp, text, len, &cf)) {
		cm_buf_put(out, cf.text.data, cf.text.len);
		cft_free(&cf);
	} else {
		cm_buf_put(out, text, len);
	}
}

static cm_err
chain_run(const st_analyzer *an, const char *text, size_t len, uint32_t first_pos, size_t upto,
          st_token_fn fn, void *ctx, uint32_t *next_pos)
{
	if (text == NULL && len > 0)
		return CM_EINVAL;
	if (len > UINT32_MAX / 2)
		return CM_ELIMIT;
	cftext cf;
	bool filtered = run_char_filters(an, text, len, &cf);
	const char *s = filtered ? (const char *)cf.text.data : text;
	size_t n = filtered ? cf.text.len : len;
	tks t;
	tks_init(&t);
	uint32_t trailing = an_chain_tokens(an, s ? s : "", n, upto, &t);
	cm_err rc = t.n >= MAX_VALUE_TOKENS ? CM_ELIMIT : CM_OK;
	/* Lucene starts at -1 and adds each increment; a first token with
	 * increment 0 still lands on position 0 */
	int64_t pos = (int64_t)first_pos - 1;
	for (size_t i = 0; i < t.n && rc == CM_OK; i++) {
		const tk *k = &t.v[i];
		pos += k->posinc;
		if (pos < (int64_t)first_pos)
			pos = first_pos;
		st_token o = {.term = tk_term(&t, k),
		              .len = k->len,
		              .position = (uint32_t)pos,
		              .start = k->start,
		              .end = k->end,
		              .type = k->type};
		if (filtered) {
			o.start = k->start < n ? cf.smap[k->start] : (uint32_t)len;
			o.end = k->end > 0 && k->end <= n ? cf.emap[k->end - 1] : o.start;
			if (o.end < o.start)
				o.end = o.start;
		}
		if (fn(ctx, &o) != 0)
			break;
	}
	if (next_pos != NULL)
		*next_pos = (uint32_t)(pos + 1 + trailing);
	if (filtered)
		cft_free(&cf);
	tks_free(&t);
	return rc;
}

cm_err
st_analyze_with(const st_analyzer *custom, st_analyzer_kind kind, const char *text, size_t len,
                uint32_t first_pos, st_token_fn fn, void *ctx, uint32_t *next_pos)
{
	if (custom != NULL)
		return st_analyzer_run(custom, text, len, first_pos, fn, ctx, next_pos);
	return st_analyze(kind, text, len, first_pos, fn, ctx, next_pos);
}

static int
concat_tok(void *ctx, const st_token *t)
{
	cm_buf_put(ctx, t->term, t->len);
	return 0;
}

cm_err
st_normalize(const st_analyzer *norm, const char *s, size_t n, cm_buf *out)
{
	return st_analyzer_run(norm, s, n, 0, concat_tok, out, NULL);
}

const char *
st_token_type(st_analyzer_kind kind, const char *text, size_t n)
{
	if (kind == ST_AN_STANDARD || kind == ST_AN_ENGLISH)
		return an_standard_type(text, n);
	return "word";
}
