/* From the query tree to the shard-level plan: fields resolved against
 * the segments, text analyzed, numeric and date bounds parsed (date math
 * included), automata compiled, multi-term expansions that need shard-wide
 * statistics (fuzzy, phrase prefix) done, and BM25 weights computed with
 * shard-level statistics (docCount and df summed over segments, deleted
 * docs included, as Lucene). */
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_buf.h"
#include "agg_int.h"
#include "exec.h"

/* ---- exec context ---- */

/* Segment fields by name, then by segment: per-field statistics are
 * gathered in one pass over them in that order. */
typedef struct fref {
	const st_field_info *fi;
	size_t seg;
} fref;

static int
fref_cmp(const void *a, const void *b)
{
	const fref *x = a, *y = b;
	int c = strcmp(x->fi->name, y->fi->name);
	return c ? c : (x->seg > y->seg) - (x->seg < y->seg);
}

/* A reader's field statistics (st_reader_aux): made once per reader, not
 * per search, since the view never changes. */
typedef struct sr_fields {
	size_t n;
	sr_fstat f[];
} sr_fields;

static void
fields_free(void *p)
{
	sr_fields *fl = p;
	for (size_t i = 0; i < fl->n; i++)
		cm_free(CM_MEM_SEARCH, atomic_load(&fl->f[i].cache));
	cm_free(CM_MEM_SEARCH, fl);
}

/* The mapping's part of a field's statistics. */
static void
fstat_resolve(const st_mapping *m, sr_fstat *fs)
{
	const st_field_def *d = NULL;
	if (m &&
	    (fs->type == ST_FT_TEXT || fs->type == ST_FT_KEYWORD || fs->type == ST_FT_SCALED_FLOAT))
		d = st_mapping_find(m, fs->name);
	if (d != NULL && fs->type != ST_FT_SCALED_FLOAT && d->type == ST_FT_TEXT) {
		fs->analyzer = d->search_analyzer;
		fs->custom_analyzer = d->custom_search_analyzer;
	} else if (d != NULL && fs->type != ST_FT_SCALED_FLOAT && d->type == ST_FT_KEYWORD) {
		fs->normalizer = d->normalizer;
	} else if (d != NULL && fs->type == ST_FT_KEYWORD && st_field_type_is_range(d->type)) {
		fs->range_type = d->type;
	}
	if (fs->type == ST_FT_SCALED_FLOAT)
		fs->scale = d && d->scaling_factor > 0 ? d->scaling_factor : 1;
	/* avgFieldLength: (float) (sumTotalTermFreq / (double) docCount) */
	float avgdl = fs->doc_count ? (float)((double)fs->sum_ttf / (double)fs->doc_count) : 1.0f;
	fs->avgdl = avgdl > 0 ? avgdl : 1.0f;
}

static sr_fields *
fields_build(const st_reader *r)
{
	size_t nseg = st_reader_nsegments(r), nrefs = 0;
	for (size_t i = 0; i < nseg; i++)
		nrefs += st_segment_nfields(st_reader_segment(r, i));
	fref *refs = cm_malloc(CM_MEM_SEARCH, (nrefs ? nrefs : 1) * sizeof *refs);
	nrefs = 0;
	for (size_t i = 0; i < nseg; i++) {
		st_segment *seg = st_reader_segment(r, i);
		for (size_t f = 0; f < st_segment_nfields(seg); f++)
			refs[nrefs++] = (fref){st_segment_field_at(seg, f), i};
	}
	/* A segment's fields are in name order already (storage assigns ids
	 * so); several segments' are merged. Names are the segments'. */
	bool sorted = true;
	for (size_t k = 1; k < nrefs && sorted && nseg > 1; k++)
		sorted = fref_cmp(&refs[k - 1], &refs[k]) < 0;
	if (!sorted)
		qsort(refs, nrefs, sizeof *refs, fref_cmp);
	sr_fields *fl = cm_calloc(CM_MEM_SEARCH, 1, sizeof(*fl) + nrefs * sizeof(sr_fstat));
	/* one segment's names, strictly ordered, are distinct: no compare */
	bool distinct = sorted && nseg == 1;
	for (size_t k = 0; k < nrefs; k++) {
		const st_field_info *fi = refs[k].fi;
		sr_fstat *fs = fl->n ? &fl->f[fl->n - 1] : NULL;
		if (!fs || distinct || strcmp(fs->name, fi->name)) {
			fs = &fl->f[fl->n++];
			fs->name = (char *)fi->name;
			fs->type = fi->type;
			fs->analyzer = fi->analyzer;
		}
		fs->flags |= fi->flags;
		fs->doc_count += fi->doc_count;
		fs->sum_ttf += fi->sum_total_term_freq;
	}
	cm_free(CM_MEM_SEARCH, refs);
	const st_mapping *m = st_reader_mapping(r);
	for (size_t i = 0; i < fl->n; i++)
		fstat_resolve(m, &fl->f[i]);
	return fl;
}

cm_err
sr_exec_open(sr_exec *x, st_reader *r, uint64_t deadline_ns, cm_error *err)
{
	memset(x, 0, sizeof *x);
	x->reader = r;
	x->err = err ? err : &x->own_err;
	err = x->err;
	x->deadline_ns = deadline_ns;
	x->nseg = st_reader_nsegments(r);
	x->segs = cm_calloc(CM_MEM_SEARCH, x->nseg ? x->nseg : 1, sizeof(sr_seg_ctx));
	uint32_t base = 0;
	for (size_t i = 0; i < x->nseg; i++) {
		sr_seg_ctx *c = &x->segs[i];
		st_segment *seg = st_reader_segment(r, i);
		c->reader = r;
		c->seg_index = i;
		c->seg = seg;
		c->live = st_reader_live(r, i);
		c->doc_base = base;
		c->deadline_ns = deadline_ns;
		base += st_segment_max_doc(seg);
		cm_err rc = st_seg_txn_begin(seg, &c->txn);
		if (rc) {
			sr_exec_close(x);
			return cm_error_set(err, rc, "cannot read segment: %s", cm_err_msg(rc));
		}
	}
	sr_fields *fl = st_reader_aux(r);
	if (!fl) {
		sr_fields *mine = fields_build(r);
		fl = st_reader_aux_keep(r, mine, fields_free);
		if (fl != mine)
			fields_free(mine);
	}
	x->fstats = fl->f;
	x->nfstats = fl->n;
	return CM_OK;
}

void
sr_exec_close(sr_exec *x)
{
	for (size_t i = 0; i < x->nseg; i++)
		if (x->segs && x->segs[i].txn)
			st_seg_txn_end(x->segs[i].txn);
	cm_free(CM_MEM_SEARCH, x->segs);
	x->segs = NULL;
	x->fstats = NULL;
	x->nseg = x->nfstats = 0;
}

const sr_fstat *
sr_exec_field(const sr_exec *x, const char *name)
{
	size_t lo = 0, hi = x->nfstats;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(x->fstats[mid].name, name);
		if (!c) {
			return &x->fstats[mid];
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* ---- plan nodes ---- */

static sr_plan *
plan_new(sr_pkind k, float boost, bool scoring)
{
	sr_plan *p = cm_calloc(CM_MEM_SEARCH, 1, sizeof *p);
	p->kind = k;
	p->boost = boost;
	p->scoring = scoring;
	return p;
}

static void
bytes_free(sr_bytes *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		cm_free(CM_MEM_SEARCH, b[i].p);
	cm_free(CM_MEM_SEARCH, b);
}

void
sr_plan_free(sr_plan *p)
{
	if (!p)
		return;
	cm_free(CM_MEM_SEARCH, p->term.p);
	cm_free(CM_MEM_SEARCH, p->set);
	bytes_free(p->terms, p->nterms);
	sr_dfa_free(p->dfa);
	cm_free(CM_MEM_SEARCH, p->fields);
	cm_free(CM_MEM_SEARCH, p->nest_path);
	cm_free(CM_MEM_SEARCH, p->nest_parent);
	for (size_t i = 0; i < p->nkids; i++)
		sr_plan_free(p->kids[i]);
	cm_free(CM_MEM_SEARCH, p->kids);
	cm_free(CM_MEM_SEARCH, p->occur);
	for (uint32_t i = 0; i < p->npos; i++)
		bytes_free(p->pos_terms[i], p->pos_nterms[i]);
	cm_free(CM_MEM_SEARCH, p->pos_terms);
	cm_free(CM_MEM_SEARCH, p->pos_nterms);
	cm_free(CM_MEM_SEARCH, p->pos_offset);
	sr_ivnode_free(p->iv);
	cm_free(CM_MEM_SEARCH, p);
}

void
sr_ivnode_free(sr_ivnode *n)
{
	if (!n)
		return;
	bytes_free(n->terms, n->nterms);
	for (size_t i = 0; i < n->nkids; i++)
		sr_ivnode_free(n->kids[i]);
	cm_free(CM_MEM_SEARCH, n->kids);
	sr_ivnode_free(n->filter_node);
	cm_free(CM_MEM_SEARCH, n);
}

static void
plan_add(sr_plan *p, sr_plan *kid, uint8_t occ)
{
	p->kids = cm_realloc(CM_MEM_SEARCH, p->kids, (p->nkids + 1) * sizeof(sr_plan *));
	p->occur = cm_realloc(CM_MEM_SEARCH, p->occur, (p->nkids + 1));
	p->kids[p->nkids] = kid;
	p->occur[p->nkids] = occ;
	p->nkids++;
}

static sr_bytes
bytes_dup(const void *s, size_t n)
{
	sr_bytes b = {cm_malloc(CM_MEM_SEARCH, n + 1), n};
	memcpy(b.p, s, n);
	b.p[n] = 0;
	return b;
}

/* ---- statistics ---- */

static uint64_t
term_df(sr_exec *x, const sr_fstat *fs, const void *t, size_t n)
{
	uint64_t df = 0;
	for (size_t i = 0; i < x->nseg; i++) {
		const st_field_info *fi = st_segment_field(x->segs[i].seg, fs->name);
		uint32_t d;
		if (!fi || !(fi->flags & ST_FI_POSTINGS))
			continue;
		/* the dictionary alone (a corrupt term counts nothing, as
		 * before; its iterator reports it) */
		if (st_term_doc_freq(x->segs[i].txn, fi, t, n, &d) == CM_OK)
			df += d;
	}
	return df;
}

static sr_plan *
term_plan(sr_exec *x, const sr_fstat *fs, const void *t, size_t n, float boost, bool scoring)
{
	sr_plan *p = plan_new(P_TERM, boost, scoring);
	p->fs = fs;
	p->term = bytes_dup(t, n);
	if (scoring)
		p->weight = boost * sr_idf(term_df(x, fs, t, n), fs->doc_count);
	return p;
}

/* ---- compile context ---- */

typedef struct cctx {
	sr_exec *x;
	cm_error *err;
	bool lenient;
	int depth;
	const char *nest_path; /* inside a nested query: its path */
} cctx;

static bool
is_text_like(st_field_type t)
{
	return t == ST_FT_TEXT || t == ST_FT_KEYWORD;
}

static bool
is_pattern(const char *f)
{
	return f && strchr(f, '*');
}

/* Fields matching pattern, searchable ones only. */
static size_t
fields_matching(sr_exec *x, const char *pat, const sr_fstat **out, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < x->nfstats && n < cap; i++) {
		const sr_fstat *fs = &x->fstats[i];
		if (fs->name[0] == '_')
			continue;
		if (fnmatch(pat, fs->name, 0) == 0)
			out[n++] = fs;
	}
	return n;
}

/* ---- minimum_should_match (ES Queries.calculateMinShouldMatch) ---- */

static bool
parse_int_str(const char *s, size_t n, long *out)
{
	char buf[32];
	while (n && isspace((unsigned char)*s))
		s++, n--;
	while (n && isspace((unsigned char)s[n - 1]))
		n--;
	if (!n || n >= sizeof buf)
		return false;
	memcpy(buf, s, n);
	buf[n] = 0;
	char *end;
	errno = 0;
	long v = strtol(buf, &end, 10);
	if (*end || errno)
		return false;
	*out = v;
	return true;
}

static bool
msm_simple(int count, const char *s, size_t n, int *out)
{
	int result = count;
	long v;
	if (n && s[n - 1] == '%') {
		if (!parse_int_str(s, n - 1, &v))
			return false;
		float calc = (float)(result * v) * (1 / 100.0f);
		result = calc < 0 ? result + (int)calc : (int)calc;
	} else {
		if (!parse_int_str(s, n, &v))
			return false;
		result = v < 0 ? result + (int)v : (int)v;
	}
	*out = result < 0 ? 0 : result;
	return true;
}

static bool
msm_calc(int count, const char *spec, int *out)
{
	if (!strchr(spec, '<'))
		return msm_simple(count, spec, strlen(spec), out);
	int result = count;
	const char *s = spec;
	while (*s) {
		while (isspace((unsigned char)*s))
			s++;
		if (!*s)
			break;
		const char *lt = strchr(s, '<');
		if (!lt)
			return false;
		long upper;
		if (!parse_int_str(s, lt - s, &upper))
			return false;
		const char *v = lt + 1;
		while (isspace((unsigned char)*v))
			v++;
		const char *e = v;
		while (*e && !isspace((unsigned char)*e))
			e++;
		if (count <= upper) {
			*out = result;
			return true;
		}
		if (!msm_simple(count, v, e - v, &result))
			return false;
		s = e;
	}
	*out = result;
	return true;
}

static cm_err
resolve_msm(cctx *c, const char *spec, int nshould, int *out)
{
	if (!spec) {
		*out = 0;
		return CM_OK;
	}
	if (!msm_calc(nshould, spec, out))
		return cm_error_set(c->err, CM_EINVAL, "invalid minimum_should_match [%s]", spec);
	return CM_OK;
}

/* ---- numbers and dates ---- */

static bool
parse_i64(const char *s, int64_t *v, bool *fractional, double *dv)
{
	char *end;
	errno = 0;
	while (isspace((unsigned char)*s))
		s++;
	if (!*s)
		return false;
	long long l = strtoll(s, &end, 10);
	if (!*end && !errno) {
		*v = l;
		*fractional = false;
		*dv = (double)l;
		return true;
	}
	errno = 0;
	double d = strtod(s, &end);
	if (*end || errno || isnan(d))
		return false;
	*dv = d;
	*fractional = true;
	return true;
}

#define MS_DAY 86400000LL

static int64_t
days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static void
civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	z += 719468;
	int64_t era = (z >= 0 ? z : z - 146096) / 146097;
	int64_t doe = z - era * 146097;
	int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t yy = yoe + era * 400;
	int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64_t mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = yy + (*m <= 2);
}

typedef struct tm_ms {
	int64_t y;
	int mo, d, h, mi, s, ms;
} tm_ms;

static tm_ms
split_ms(int64_t t)
{
	tm_ms r;
	int64_t days = t / MS_DAY, rem = t % MS_DAY;
	if (rem < 0) {
		rem += MS_DAY;
		days--;
	}
	civil_from_days(days, &r.y, &r.mo, &r.d);
	r.h = (int)(rem / 3600000);
	r.mi = (int)(rem / 60000 % 60);
	r.s = (int)(rem / 1000 % 60);
	r.ms = (int)(rem % 1000);
	return r;
}

static int64_t
join_ms(tm_ms t)
{
	/* normalise months */
	int64_t mo = t.mo - 1;
	t.y += mo >= 0 ? mo / 12 : -((11 - mo) / 12);
	mo = ((mo % 12) + 12) % 12;
	t.mo = (int)mo + 1;
	static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int md = mdays[t.mo - 1];
	if (t.mo == 2 && ((t.y % 4 == 0 && t.y % 100 != 0) || t.y % 400 == 0))
		md = 29;
	if (t.d > md)
		t.d = md; /* Java's plusMonths clamps the day */
	return days_from_civil(t.y, t.mo, t.d) * MS_DAY + t.h * 3600000LL + t.mi * 60000LL +
	       t.s * 1000LL + t.ms;
}

/* time_zone: "Z", "UTC", "+01:00", "-0530"; IANA names are not supported. */
static bool
parse_tz(const char *tz, int64_t *off_ms)
{
	*off_ms = 0;
	if (!tz || !*tz || !strcmp(tz, "Z") || !strcasecmp(tz, "UTC") || !strcasecmp(tz, "GMT"))
		return true;
	if (tz[0] != '+' && tz[0] != '-')
		return false;
	int h = 0, m = 0;
	if (sscanf(tz + 1, "%d:%d", &h, &m) < 1) {
		return false;
	}
	if (!strchr(tz, ':') && strlen(tz + 1) == 4) {
		h = atoi(tz + 1) / 100;
		m = atoi(tz + 1) % 100;
	}
	*off_ms = (tz[0] == '-' ? -1 : 1) * (h * 3600000LL + m * 60000LL);
	return true;
}

/* Rounds t (local time = t + off) down to unit, or to the unit's last ms. */
static int64_t
round_unit(int64_t t, char unit, bool up, int64_t off)
{
	tm_ms r = split_ms(t + off);
	switch (unit) {
	case 'y':
		r.mo = 1;
		/* fallthrough */
	case 'M':
		r.d = 1;
		/* fallthrough */
	case 'd':
		r.h = 0;
		/* fallthrough */
	case 'h':
	case 'H':
		r.mi = 0;
		/* fallthrough */
	case 'm':
		r.s = 0;
		/* fallthrough */
	case 's':
		r.ms = 0;
		break;
	case 'w': {
		int64_t days = (t + off) / MS_DAY - ((t + off) % MS_DAY < 0);
		int64_t dow = ((days + 3) % 7 + 7) % 7; /* 0 = Monday; 1970-01-01 was a Thursday */
		int64_t start = (days - dow) * MS_DAY;
		return (up ? start + 7 * MS_DAY - 1 : start) - off;
	}
	}
	int64_t lo = join_ms(r);
	if (!up)
		return lo - off;
	tm_ms n = r;
	switch (unit) {
	case 'y':
		n.y++;
		break;
	case 'M':
		n.mo++;
		break;
	case 'd':
		return lo + MS_DAY - 1 - off;
	case 'h':
	case 'H':
		return lo + 3600000 - 1 - off;
	case 'm':
		return lo + 60000 - 1 - off;
	case 's':
		return lo + 1000 - 1 - off;
	}
	return join_ms(n) - 1 - off;
}

static int64_t
add_unit(int64_t t, char unit, int64_t k, int64_t off)
{
	switch (unit) {
	case 'y': {
		tm_ms r = split_ms(t + off);
		r.y += k;
		return join_ms(r) - off;
	}
	case 'M': {
		tm_ms r = split_ms(t + off);
		r.mo += (int)k;
		return join_ms(r) - off;
	}
	case 'w':
		return t + k * 7 * MS_DAY;
	case 'd':
		return t + k * MS_DAY;
	case 'h':
	case 'H':
		return t + k * 3600000;
	case 'm':
		return t + k * 60000;
	case 's':
		return t + k * 1000;
	}
	return t;
}

/* The bound a date written with less precision than ms rounds up to
 * (gt, lte): ES's round-up parser defaults a missing month and day to 01
 * and a missing hour, minute, second and fraction to their maximum, so
 * "lte": "2099-12" is 2099-12-01T23:59:59.999, not the month's end. */
/* The unit a date pattern's finest field rounds up: 's', 'm' or 'h' when
 * it writes seconds, minutes or hours, 'd' when it stops at the day,
 * month or year (the day stays 01 then), 0 with a fraction. */
static char
pattern_round_unit(const char *f, size_t n)
{
	char unit = 'd';
	bool quoted = false;
	for (size_t i = 0; i < n; i++) {
		char c = f[i];
		if (c == '\'') {
			quoted = !quoted;
			continue;
		}
		if (quoted)
			continue;
		if (c == 'S' || c == 'n' || c == 'N' || c == 'A')
			return 0;
		if (c == 's')
			unit = 's';
		else if (c == 'm' && unit != 's')
			unit = 'm';
		else if ((c == 'H' || c == 'h' || c == 'k' || c == 'K') && unit == 'd')
			unit = 'h';
	}
	return unit;
}

/* A custom pattern, not a named format: "dd/MM/yyyy", "uuuu" ("date" and
 * "year" are names). */
static bool
is_date_pattern(const char *f, size_t n)
{
	bool letters_only = true;
	for (size_t i = 0; i < n; i++) {
		if (f[i] == '_')
			return false;
		if (!strchr("yuMdHhmsS", f[i]))
			letters_only = false;
		if ((f[i] < 'a' || f[i] > 'z') && (f[i] < 'A' || f[i] > 'Z'))
			return true; /* a separator */
	}
	return letters_only;
}

static int64_t date_round_up_iso(const char *s, size_t n, int64_t v, int64_t off);

/* A bound parsed by format rounds up by the alternative that read it: a
 * custom pattern by its finest field, a named format as the ISO forms. */
static int64_t
date_round_up_missing(const char *s, size_t n, const char *format, int64_t v, int64_t off)
{
	for (const char *f = format; f && *f;) {
		const char *sep = strstr(f, "||");
		size_t fn = sep ? (size_t)(sep - f) : strlen(f);
		char alt[128];
		int64_t t;
		if (fn < sizeof alt) {
			memcpy(alt, f, fn);
			alt[fn] = 0;
			if (st_date_parse(s, n, alt, &t)) {
				if (!strncmp(alt, "epoch_", 6))
					return v;
				if (!is_date_pattern(alt, fn))
					break;
				char unit = pattern_round_unit(alt, fn);
				return unit ? round_unit(v, unit, true, off) : v;
			}
		}
		if (!sep)
			break;
		f = sep + 2;
	}
	return date_round_up_iso(s, n, v, off);
}

static int64_t
date_round_up_iso(const char *s, size_t n, int64_t v, int64_t off)
{
	/* ISO forms only: yyyy, yyyy-MM, yyyy-MM-dd, ...THH, ...THH:mm, ...THH:mm:ss */
	size_t k = 0;
	while (k < n && (isdigit((unsigned char)s[k]) || s[k] == '-' || s[k] == 'T' || s[k] == ':'))
		k++;
	if (k < n && s[k] != 'Z' && s[k] != '+' && s[k] != '.')
		return v;
	if (k < n && s[k] == '.')
		return v;
	bool only_digits = true;
	for (size_t i = 0; i < k; i++)
		if (!isdigit((unsigned char)s[i]))
			only_digits = false;
	if (only_digits && k != 4)
		return v; /* epoch millis */
	switch (k) {
	case 4:
	case 7:
	case 10:
		return round_unit(v, 'd', true, off);
	case 13:
		return round_unit(v, 'h', true, off);
	case 16:
		return round_unit(v, 'm', true, off);
	case 19:
		return round_unit(v, 's', true, off);
	}
	return v;
}

/* Date math: "now-1d/d", "2020-01-01||+1M/M", plain dates in `format`.
 * An IANA time_zone applies its offset at the anchor instant. */
static bool parse_date_math_in(const char *s, const char *format, int64_t off, const agg_tz *ztz,
                               bool round_up, int64_t *out);

static bool
parse_date_math(const char *s, const char *format, const char *tz, bool round_up, int64_t *out)
{
	int64_t off;
	if (parse_tz(tz, &off))
		return parse_date_math_in(s, format, off, NULL, round_up, out);
	agg_tz *ztz = NULL;
	cm_error e = {0};
	if (agg_tz_parse(tz, &ztz, &e))
		return false;
	bool ok = parse_date_math_in(s, format, 0, ztz, round_up, out);
	agg_tz_free(ztz);
	return ok;
}

static bool
parse_date_math_in(const char *s, const char *format, int64_t off, const agg_tz *ztz,
                   bool round_up, int64_t *out)
{
	const char *math;
	int64_t t;
	if (!strncmp(s, "now", 3)) {
		t = cm_wall_ms();
		if (ztz)
			off = agg_tz_offset(ztz, t);
		math = s + 3;
	} else {
		const char *bars = strstr(s, "||");
		size_t n = bars ? (size_t)(bars - s) : strlen(s);
		if (!st_date_parse(s, n, format, &t)) {
			return false;
		}
		/* a date without an offset is local to time_zone */
		bool has_off = false;
		for (size_t i = 10; i < n; i++)
			if (s[i] == 'Z' || s[i] == '+' || (s[i] == '-' && i > 10))
				has_off = true;
		bool epoch = true;
		for (size_t i = 0; i < n; i++)
			if (!isdigit((unsigned char)s[i]) && s[i] != '-')
				epoch = false;
		if (!has_off && !(epoch && n != 4 && n != 7 && n != 10)) {
			if (ztz)
				t = agg_tz_local_to_utc(ztz, t);
			else
				t -= off;
		}
		if (ztz)
			off = agg_tz_offset(ztz, t);
		if (round_up && !bars)
			t = date_round_up_missing(s, n, format, t, off);
		if (!bars) {
			*out = t;
			return true;
		}
		math = bars + 2;
	}
	while (*math) {
		char op = *math++;
		if (op == '/') {
			char unit = *math++;
			if (!strchr("yMwdhHms", unit) || !unit)
				return false;
			t = round_unit(t, unit, round_up, off);
		} else if (op == '+' || op == '-') {
			int64_t k = 0;
			bool digits = false;
			while (isdigit((unsigned char)*math)) {
				k = k * 10 + (*math++ - '0');
				digits = true;
				if (k > 100000000)
					return false;
			}
			if (!digits)
				k = 1;
			char unit = *math++;
			if (!unit || !strchr("yMwdhHms", unit))
				return false;
			t = add_unit(t, unit, op == '-' ? -k : k, off);
		} else {
			return false;
		}
	}
	*out = t;
	return true;
}

typedef enum { B_GT, B_GTE, B_LT, B_LTE } bound_kind;

static bool parse_date_math(const char *s, const char *format, const char *tz, bool round_up,
                            int64_t *out);

/* date_nanos: a plain date keeps its nanoseconds; date math and time
 * zones are worked out in millis and widened to the whole millisecond. */
static int
nanos_bound(const char *v, bound_kind k, const char *format, const char *tz, int64_t *out)
{
	int64_t t;
	bool up = k == B_GT || k == B_LTE;
	if (tz == NULL && strncmp(v, "now", 3) != 0 && strstr(v, "||") == NULL &&
	    st_date_parse_ns(v, strlen(v), format, &t)) {
		/* rounding up fills fields left out with their largest value */
		int64_t ms;
		if (up && parse_date_math(v, format, tz, true, &ms) && ms > t / 1000000 &&
		    ms <= INT64_MAX / 1000000 - 1)
			t = ms * 1000000 + 999999;
	} else {
		int64_t ms;
		if (!parse_date_math(v, format, tz, up, &ms))
			return -1;
		if (ms < 0)
			t = up ? (ms < -1 ? -1 : ms * 1000000 + 999999) : INT64_MIN / 2;
		else if (ms > INT64_MAX / 1000000 - 1)
			t = INT64_MAX;
		else
			t = ms * 1000000 + (up ? 999999 : 0);
	}
	if (k == B_GT) {
		if (t == INT64_MAX)
			return 0;
		t++;
	} else if (k == B_LT) {
		t--;
	}
	*out = t;
	return 1;
}

static bool
number_text(const char *v, double *d)
{
	char *end;
	if (!*v)
		return false;
	*d = strtod(v, &end);
	return !*end && end != v && !isnan(*d);
}

/* half_float as ES: the nearest halves at or inside the bound. */
static int
half_bound(const char *v, bound_kind k, int64_t *out)
{
	double d;
	if (!number_text(v, &d))
		return -1;
	d = (double)(float)d; /* ES parses the bound as a float */
	double h = st_half_round(d);
	if (k == B_GTE && h < d)
		h = st_half_next(h, 1);
	else if (k == B_GT && h <= d)
		h = st_half_next(h, 1);
	else if (k == B_LTE && h > d)
		h = st_half_next(h, -1);
	else if (k == B_LT && h >= d)
		h = st_half_next(h, -1);
	*out = st_double_to_sortable(h);
	return 1;
}

/* scaled_float as ES: the bound scaled, then ceil (lower) or floor (upper). */
static int
scaled_bound(double scale, const char *v, bound_kind k, int64_t *out)
{
	double d;
	if (!number_text(v, &d))
		return -1;
	double x = d * scale;
	if (k == B_GT)
		x = nextafter(x, INFINITY);
	else if (k == B_LT)
		x = nextafter(x, -INFINITY);
	x = k == B_GT || k == B_GTE ? ceil(x) : floor(x);
	if (x >= 9.2233720368547758e18)
		*out = INT64_MAX;
	else if (x <= -9.2233720368547758e18)
		*out = INT64_MIN;
	else
		*out = (int64_t)x;
	return 1;
}

/* unsigned_long: exact for integer text; numbers beyond the range clamp,
 * fractions round inward. */
static int
ulong_bound(const char *v, bound_kind k, int64_t *out)
{
	bool lower = k == B_GT || k == B_GTE;
	uint64_t u;
	if (!st_ulong_parse(v, false, &u)) {
		double d;
		if (!number_text(v, &d))
			return -1;
		double r = lower ? ceil(d) : floor(d);
		if (r < 0) {
			if (!lower)
				return 0;
			*out = st_ulong_to_col(0);
			return 1;
		}
		if (r >= 18446744073709551616.0) {
			if (lower)
				return 0;
			*out = st_ulong_to_col(UINT64_MAX);
			return 1;
		}
		u = (uint64_t)r;
		if (r != d) { /* a fraction: already strictly inside */
			*out = st_ulong_to_col(u);
			return 1;
		}
	}
	if (k == B_GT) {
		if (u == UINT64_MAX)
			return 0;
		u++;
	} else if (k == B_LT) {
		if (u == 0)
			return 0;
		u--;
	}
	*out = st_ulong_to_col(u);
	return 1;
}

/* Parses a bound for a column field into an inclusive column-space
 * value. Returns 1 ok, 0 empty range, -1 parse error. */
static int
column_bound(const sr_fstat *fs, const char *v, bound_kind k, const char *format, const char *tz,
             int64_t *out)
{
	bool lower = k == B_GT || k == B_GTE;
	switch (fs->type) {
	case ST_FT_DATE: {
		int64_t t;
		/* gt and lte round up (ES's roundUp property), gte and lt down */
		if (!parse_date_math(v, format, tz, k == B_GT || k == B_LTE, &t))
			return -1;
		if (k == B_GT) {
			if (t == INT64_MAX)
				return 0;
			t++;
		} else if (k == B_LT) {
			if (t == INT64_MIN)
				return 0;
			t--;
		}
		*out = t;
		return 1;
	}
	case ST_FT_BOOLEAN: {
		int64_t b;
		if (!strcmp(v, "true"))
			b = 1;
		else if (!strcmp(v, "false"))
			b = 0;
		else
			return -1;
		if (k == B_GT)
			b++;
		else if (k == B_LT)
			b--;
		*out = b;
		return 1;
	}
	case ST_FT_DATE_NANOS:
		return nanos_bound(v, k, format, tz, out);
	case ST_FT_HALF_FLOAT:
		return half_bound(v, k, out);
	case ST_FT_SCALED_FLOAT:
		return scaled_bound(fs->scale, v, k, out);
	case ST_FT_UNSIGNED_LONG:
		return ulong_bound(v, k, out);
	case ST_FT_DOUBLE:
	case ST_FT_FLOAT: {
		char *end;
		errno = 0;
		double d = strtod(v, &end);
		if (*end || end == v || isnan(d))
			return -1;
		if (fs->type == ST_FT_FLOAT) {
			/* Float.parseFloat: nearest float; past the type's range
			 * the bound is an infinity and clamps (ES 8.14) */
			float f = d >= 0x1.ffffffp+127    ? INFINITY
			          : d <= -0x1.ffffffp+127 ? -INFINITY
			                                  : (float)d;
			if (k == B_GT)
				f = nextafterf(f, INFINITY);
			else if (k == B_LT)
				f = nextafterf(f, -INFINITY);
			*out = st_double_to_sortable((double)f);
			return 1;
		}
		int64_t s = st_double_to_sortable(d);
		if (k == B_GT)
			s++;
		else if (k == B_LT)
			s--;
		*out = s;
		return 1;
	}
	default: {
		int64_t i;
		bool frac;
		double d;
		if (!parse_i64(v, &i, &frac, &d))
			return -1;
		if (frac) {
			double r = lower ? ceil(d) : floor(d);
			bool exact = r == d;
			if (r >= 9.2233720368547758e18)
				i = INT64_MAX;
			else if (r <= -9.2233720368547758e18)
				i = INT64_MIN;
			else
				i = (int64_t)r;
			if (exact) {
				if (k == B_GT) {
					if (i == INT64_MAX)
						return 0;
					i++;
				} else if (k == B_LT) {
					if (i == INT64_MIN)
						return 0;
					i--;
				}
			}
		} else if (k == B_GT) {
			if (i == INT64_MAX)
				return 0;
			i++;
		} else if (k == B_LT) {
			if (i == INT64_MIN)
				return 0;
			i--;
		}
		*out = i;
		return 1;
	}
	}
}

/* An exact value for term/terms on a column field; false if it cannot
 * equal any value of the field type. -1 parse error. */
static int
column_point(const sr_fstat *fs, const char *v, int64_t *lo, int64_t *hi)
{
	if (fs->type == ST_FT_DATE) {
		if (!parse_date_math(v, NULL, NULL, false, lo) || !parse_date_math(v, NULL, NULL, true, hi))
			return -1;
		return 1;
	}
	if (fs->type == ST_FT_SCALED_FLOAT) {
		/* ES: Math.round(value * scaling_factor) */
		double d;
		if (!number_text(v, &d))
			return -1;
		double x = floor(d * fs->scale + 0.5);
		if (!(x < 9.2233720368547758e18 && x > -9.2233720368547758e18))
			return 0;
		*lo = *hi = (int64_t)x;
		return 1;
	}
	if (fs->type == ST_FT_HALF_FLOAT) {
		double d;
		if (!number_text(v, &d))
			return -1;
		*lo = *hi = st_double_to_sortable(st_half_round((double)(float)d));
		return 1;
	}
	if (fs->type == ST_FT_UNSIGNED_LONG) {
		/* a whole number only; a fraction equals no value */
		uint64_t u;
		if (st_ulong_parse(v, false, &u)) {
			*lo = *hi = st_ulong_to_col(u);
			return 1;
		}
		double d;
		if (!number_text(v, &d))
			return -1;
		if (d != floor(d) || d < 0 || d >= 18446744073709551616.0)
			return 0;
		*lo = *hi = st_ulong_to_col((uint64_t)d);
		return 1;
	}
	int r = column_bound(fs, v, B_GTE, NULL, NULL, lo);
	if (r <= 0)
		return r;
	r = column_bound(fs, v, B_LTE, NULL, NULL, hi);
	if (r <= 0)
		return r;
	return *lo <= *hi;
}

static cm_err
value_error(cctx *c, const sr_fstat *fs, const char *v)
{
	return cm_error_set_type(c->err, CM_EINVAL, "query_shard_exception",
	                         "failed to create query: failed to parse value [%s] for field [%s] of "
	                         "type [%s]",
	                         v, fs->name, st_field_type_name(fs->type));
}

/* ---- leaf compilers ---- */

static cm_err compile(cctx *c, const sr_query *q, float boost, bool scoring, sr_plan **out);

static sr_plan *
none(void)
{
	return plan_new(P_NONE, 1, false);
}

static cm_err
compile_column_set(cctx *c, const sr_fstat *fs, char **vals, size_t n, float boost, bool scoring,
                   sr_plan **out)
{
	sr_plan *p = plan_new(P_COLUMN, boost, scoring);
	p->fs = fs;
	bool ranged = false;
	p->set = cm_malloc(CM_MEM_SEARCH, (n ? n : 1) * sizeof(int64_t));
	sr_plan *alt = NULL; /* dates: each term is a range; use a bool of ranges */
	for (size_t i = 0; i < n; i++) {
		int64_t lo, hi;
		int r = column_point(fs, vals[i], &lo, &hi);
		if (r < 0) {
			if (c->lenient)
				continue;
			sr_plan_free(p);
			sr_plan_free(alt);
			return value_error(c, fs, vals[i]);
		}
		if (r == 0)
			continue;
		if (lo != hi) {
			ranged = true;
			if (!alt)
				alt = plan_new(P_BOOL, boost, false);
			sr_plan *k = plan_new(P_COLUMN, 1, false);
			k->fs = fs;
			k->lo = lo;
			k->hi = hi;
			plan_add(alt, k, OCC_SHOULD);
		} else {
			p->set[p->nset++] = lo;
		}
	}
	if (ranged) {
		if (p->nset) {
			plan_add(alt, p, OCC_SHOULD);
			p->boost = 1;
			p->scoring = false;
		} else {
			sr_plan_free(p);
		}
		alt->msm = 1;
		sr_plan *cs = plan_new(P_CONST, boost, scoring);
		plan_add(cs, alt, OCC_FILTER);
		*out = cs;
		return CM_OK;
	}
	if (!p->nset) {
		sr_plan_free(p);
		*out = none();
		return CM_OK;
	}
	/* sort + unique */
	for (size_t i = 1; i < p->nset; i++) {
		int64_t v = p->set[i];
		size_t j = i;
		while (j && p->set[j - 1] > v) {
			p->set[j] = p->set[j - 1];
			j--;
		}
		p->set[j] = v;
	}
	size_t w = 0;
	for (size_t i = 0; i < p->nset; i++)
		if (!w || p->set[i] != p->set[w - 1])
			p->set[w++] = p->set[i];
	p->nset = w;
	if (w == 1) {
		p->lo = p->hi = p->set[0];
		cm_free(CM_MEM_SEARCH, p->set);
		p->set = NULL;
		p->nset = 0;
	}
	*out = p;
	return CM_OK;
}

static const sr_fstat *
field_or_null(cctx *c, const char *name)
{
	return name ? sr_exec_field(c->x, name) : NULL;
}

/* Text for term-level queries built from query_string on text fields is
 * lowercased like ES's multi-term normalisation. */
static char *
norm_value(const sr_query *q, const sr_fstat *fs, const char *v)
{
	char *s = cm_strdup(CM_MEM_SEARCH, v ? v : "");
	if (q->analyze_multiterm && fs && fs->type == ST_FT_TEXT)
		for (char *p = s; *p; p++)
			*p = (char)tolower((unsigned char)*p);
	return s;
}

static cm_err
compile_ids(cctx *c, char **vals, size_t n, float boost, bool scoring, sr_plan **out)
{
	sr_plan *p = plan_new(P_IDS, boost, scoring);
	p->terms = cm_calloc(CM_MEM_SEARCH, n ? n : 1, sizeof(sr_bytes));
	for (size_t i = 0; i < n; i++)
		p->terms[p->nterms++] = bytes_dup(vals[i], strlen(vals[i]));
	*out = p;
	return CM_OK;
}

static cm_err
escape_literal(const char *v, char **out)
{
	size_t n = strlen(v);
	char *s = cm_malloc(CM_MEM_SEARCH, 2 * n + 2);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (v[i] == '*' || v[i] == '?' || v[i] == '\\')
			s[k++] = '\\';
		s[k++] = v[i];
	}
	s[k] = 0;
	*out = s;
	return CM_OK;
}

/* ---- ip fields: 16-byte terms, matched with constant scores as ES's points ---- */

static cm_err
ip_error(cctx *c, const char *v)
{
	return cm_error_set_type(c->err, CM_EINVAL, "query_shard_exception",
	                         "failed to create query: '%s' is not an IP string literal.", v);
}

static sr_plan *
ip_range_plan(const sr_fstat *fs, const uint8_t *lo, bool lo_incl, const uint8_t *hi,
              bool hi_incl)
{
	sr_plan *p = plan_new(P_TERMRANGE, 1, false);
	p->fs = fs;
	p->terms = cm_calloc(CM_MEM_SEARCH, 2, sizeof(sr_bytes));
	p->nterms = 2;
	if (lo)
		p->terms[0] = bytes_dup(lo, ST_IP_LEN);
	if (hi)
		p->terms[1] = bytes_dup(hi, ST_IP_LEN);
	p->lo_incl = lo_incl;
	p->hi_incl = hi_incl;
	return p;
}

/* One value of a term/terms query: an address or a CIDR block. */
static int
ip_value_plan(cctx *c, const sr_fstat *fs, const char *v, sr_plan **out)
{
	uint8_t lo[ST_IP_LEN], hi[ST_IP_LEN];
	size_t n = strlen(v);
	if (memchr(v, '/', n)) {
		if (!st_cidr_parse(v, n, lo, hi))
			return -1;
		*out = ip_range_plan(fs, lo, true, hi, true);
		return 1;
	}
	if (!st_ip_parse(v, n, lo))
		return -1;
	*out = term_plan(c->x, fs, lo, ST_IP_LEN, 1, false);
	return 1;
}

static sr_plan *
constant(sr_plan *kid, float boost, bool scoring)
{
	sr_plan *cs = plan_new(P_CONST, boost, scoring);
	plan_add(cs, kid, OCC_FILTER);
	return cs;
}

static cm_err
compile_ip_terms(cctx *c, const sr_fstat *fs, char **vals, size_t n, float boost, bool scoring,
                 sr_plan **out)
{
	sr_plan *any = plan_new(P_BOOL, 1, false);
	any->msm = 1;
	for (size_t i = 0; i < n; i++) {
		sr_plan *k;
		if (ip_value_plan(c, fs, vals[i], &k) < 0) {
			if (c->lenient)
				continue;
			sr_plan_free(any);
			return ip_error(c, vals[i]);
		}
		plan_add(any, k, OCC_SHOULD);
	}
	if (!any->nkids) {
		sr_plan_free(any);
		*out = none();
		return CM_OK;
	}
	*out = constant(any, boost, scoring);
	return CM_OK;
}

static cm_err
compile_ip_range(cctx *c, const sr_query *q, const sr_fstat *fs, float boost, bool scoring,
                 sr_plan **out)
{
	uint8_t lo[ST_IP_LEN], hi[ST_IP_LEN];
	const char *lv = q->gte ? q->gte : q->gt, *hv = q->lte ? q->lte : q->lt;
	/* a CIDR bound widens to its block, as ES's InetAddresses.parseCidr */
	uint8_t tmp[ST_IP_LEN];
	if (lv && !st_ip_parse(lv, strlen(lv), lo) &&
	    !(q->gte && st_cidr_parse(lv, strlen(lv), lo, tmp)))
		return c->lenient ? (*out = none(), CM_OK) : ip_error(c, lv);
	if (hv && !st_ip_parse(hv, strlen(hv), hi) &&
	    !(q->lte && st_cidr_parse(hv, strlen(hv), tmp, hi)))
		return c->lenient ? (*out = none(), CM_OK) : ip_error(c, hv);
	*out = constant(ip_range_plan(fs, lv ? lo : NULL, q->gte != NULL, hv ? hi : NULL,
	                              q->lte != NULL),
	                boost, scoring);
	return CM_OK;
}

/* ---- range fields ---- */

/* The column type whose bounds a range type's query values read as. */
static st_field_type
range_elem_type(st_field_type t)
{
	switch (t) {
	case ST_FT_INTEGER_RANGE:
		return ST_FT_INTEGER;
	case ST_FT_FLOAT_RANGE:
		return ST_FT_FLOAT;
	case ST_FT_DOUBLE_RANGE:
		return ST_FT_DOUBLE;
	case ST_FT_DATE_RANGE:
		return ST_FT_DATE;
	default:
		return ST_FT_LONG;
	}
}

static cm_err
range_value_error(cctx *c, const sr_fstat *fs, const char *v)
{
	return cm_error_set_type(
	    c->err, CM_EINVAL, "query_shard_exception",
	    "failed to create query: failed to parse value [%s] for field [%s] of "
	    "type [%s]",
	    v, fs->name, st_field_type_name(fs->range_type));
}

/* One query bound of a range field, inclusive: 1 ok, 0 empty (nothing
 * above a gt of the greatest value), -1 not a value of the type. */
static int
range_query_bound(const sr_fstat *fs, const char *v, bound_kind k, const char *format,
                  const char *tz, st_range_bound *out)
{
	memset(out, 0, sizeof(*out));
	if (fs->range_type == ST_FT_IP_RANGE) {
		size_t n = strlen(v);
		uint8_t other[ST_IP_LEN];
		bool lower = k == B_GT || k == B_GTE;
		if (!st_ip_parse(v, n, out->ip) &&
		    !(memchr(v, '/', n) && (lower ? st_cidr_parse(v, n, out->ip, other)
		                                  : st_cidr_parse(v, n, other, out->ip))))
			return -1;
		if (k == B_GT || k == B_LT)
			return st_range_step(ST_FT_IP_RANGE, out, k == B_GT ? 1 : -1) ? 1 : 0;
		return 1;
	}
	sr_fstat elem = *fs;
	elem.type = range_elem_type(fs->range_type);
	return column_bound(&elem, v, k, format, tz, &out->i);
}

static sr_plan *
range_rel_plan(const sr_fstat *fs, st_range_rel rel, const st_range_bound *lo,
               const st_range_bound *hi)
{
	sr_plan *p = plan_new(P_RANGEREL, 1, false);
	p->fs = fs;
	p->rel = rel;
	p->rq[0] = *lo;
	p->rq[1] = *hi;
	return p;
}

/* term/terms on a range field: the documents with a range holding one
 * of the values (ES: a range query from the value to itself). */
static cm_err
compile_range_terms(cctx *c, const sr_fstat *fs, char **vals, size_t n, float boost, bool scoring,
                    sr_plan **out)
{
	sr_plan *any = plan_new(P_BOOL, 1, false);
	any->msm = 1;
	for (size_t i = 0; i < n; i++) {
		st_range_bound lo, hi;
		int r = range_query_bound(fs, vals[i], B_GTE, NULL, NULL, &lo);
		if (r > 0)
			r = range_query_bound(fs, vals[i], B_LTE, NULL, NULL, &hi);
		if (r < 0 && !c->lenient) {
			sr_plan_free(any);
			return range_value_error(c, fs, vals[i]);
		}
		if (r > 0)
			plan_add(any, range_rel_plan(fs, ST_REL_INTERSECTS, &lo, &hi), OCC_SHOULD);
	}
	if (!any->nkids) {
		sr_plan_free(any);
		*out = none();
		return CM_OK;
	}
	*out = constant(any, boost, scoring);
	return CM_OK;
}

static cm_err
compile_range_field(cctx *c, const sr_query *q, const sr_fstat *fs, float boost, bool scoring,
                    sr_plan **out)
{
	st_range_bound b[2];
	st_range_min(fs->range_type, &b[0]);
	st_range_max(fs->range_type, &b[1]);
	struct {
		const char *v;
		bound_kind k;
	} in[4] = {{q->gt, B_GT}, {q->gte, B_GTE}, {q->lt, B_LT}, {q->lte, B_LTE}};
	const char *mfmt = q->format;
	if (!mfmt && fs->range_type == ST_FT_DATE_RANGE) {
		const st_mapping *m = st_reader_mapping(c->x->reader);
		const st_field_def *d = m ? st_mapping_find(m, q->field) : NULL;
		mfmt = d ? d->format : NULL;
	}
	for (int i = 0; i < 4; i++) {
		if (!in[i].v)
			continue;
		st_range_bound v;
		int r = range_query_bound(fs, in[i].v, in[i].k, mfmt, q->time_zone, &v);
		if (r < 0 && mfmt && !q->format)
			r = range_query_bound(fs, in[i].v, in[i].k, NULL, q->time_zone, &v);
		if (r < 0) {
			if (c->lenient) {
				*out = none();
				return CM_OK;
			}
			return range_value_error(c, fs, in[i].v);
		}
		if (r == 0) {
			*out = none();
			return CM_OK;
		}
		b[i >= 2] = v;
	}
	if (st_range_cmp(fs->range_type, &b[0], &b[1]) > 0) {
		*out = none();
		return CM_OK;
	}
	*out =
	    constant(range_rel_plan(fs, (st_range_rel)q->relation, &b[0], &b[1]), boost, scoring);
	return CM_OK;
}

static cm_err
compile_term(cctx *c, const sr_query *q, const sr_fstat *fs, float boost, bool scoring,
             sr_plan **out)
{
	const char *v = q->value ? q->value : "";
	if (!strcmp(q->field, "_id")) {
		char *vals[1] = {(char *)v};
		return compile_ids(c, vals, 1, boost, scoring, out);
	}
	if (!fs) {
		*out = none();
		return CM_OK;
	}
	if (fs->type == ST_FT_IP) {
		char *vals[1] = {(char *)v};
		return compile_ip_terms(c, fs, vals, 1, boost, scoring, out);
	}
	if (st_field_type_is_range(fs->range_type)) {
		char *vals[1] = {(char *)v};
		return compile_range_terms(c, fs, vals, 1, boost, scoring, out);
	}
	if (!is_text_like(fs->type)) {
		char *vals[1] = {(char *)v};
		return compile_column_set(c, fs, vals, 1, boost, scoring, out);
	}
	if (q->case_insensitive) {
		char *pat;
		escape_literal(v, &pat);
		sr_plan *p = plan_new(P_MULTI, boost, scoring);
		p->fs = fs;
		cm_err rc = sr_dfa_wildcard(pat, true, &p->dfa, c->err);
		cm_free(CM_MEM_SEARCH, pat);
		if (rc) {
			sr_plan_free(p);
			return rc;
		}
		*out = p;
		return CM_OK;
	}
	if (fs->normalizer != NULL) {
		cm_buf nb;
		cm_buf_init(&nb, CM_MEM_SEARCH);
		cm_err rc = st_normalize(fs->normalizer, v, strlen(v), &nb);
		if (!rc)
			*out = term_plan(c->x, fs, nb.len ? (const char *)nb.data : "", nb.len, boost,
			                 scoring);
		cm_buf_free(&nb);
		return rc ? cm_error_set(c->err, rc, "normalizer failed") : CM_OK;
	}
	*out = term_plan(c->x, fs, v, strlen(v), boost, scoring);
	return CM_OK;
}

static cm_err
compile_terms(cctx *c, const sr_query *q, const sr_fstat *fs, float boost, bool scoring,
              sr_plan **out)
{
	if (q->nvalues > SR_MAX_CLAUSES * 16)
		return cm_error_set(c->err, CM_ELIMIT, "terms query has too many terms [%zu]", q->nvalues);
	if (!strcmp(q->field, "_id"))
		return compile_ids(c, q->values, q->nvalues, boost, scoring, out);
	if (!fs || !q->nvalues) {
		*out = none();
		return CM_OK;
	}
	if (fs->type == ST_FT_IP)
		return compile_ip_terms(c, fs, q->values, q->nvalues, boost, scoring, out);
	if (st_field_type_is_range(fs->range_type))
		return compile_range_terms(c, fs, q->values, q->nvalues, boost, scoring, out);
	if (!is_text_like(fs->type))
		return compile_column_set(c, fs, q->values, q->nvalues, boost, scoring, out);
	sr_plan *p = plan_new(P_TERMSET, boost, scoring);
	p->fs = fs;
	p->terms = cm_calloc(CM_MEM_SEARCH, q->nvalues, sizeof(sr_bytes));
	for (size_t i = 0; i < q->nvalues; i++) {
		if (fs->normalizer != NULL) {
			cm_buf nb;
			cm_buf_init(&nb, CM_MEM_SEARCH);
			st_normalize(fs->normalizer, q->values[i], strlen(q->values[i]), &nb);
			p->terms[p->nterms++] = bytes_dup(nb.len ? (const char *)nb.data : "", nb.len);
			cm_buf_free(&nb);
			continue;
		}
		p->terms[p->nterms++] = bytes_dup(q->values[i], strlen(q->values[i]));
	}
	*out = p;
	return CM_OK;
}

static cm_err
compile_range(cctx *c, const sr_query *q, const sr_fstat *fs, float boost, bool scoring,
              sr_plan **out)
{
	if (!fs) {
		*out = none();
		return CM_OK;
	}
	if (fs->type == ST_FT_IP)
		return compile_ip_range(c, q, fs, boost, scoring, out);
	if (st_field_type_is_range(fs->range_type))
		return compile_range_field(c, q, fs, boost, scoring, out);
	if (is_text_like(fs->type)) {
		sr_plan *p = plan_new(P_TERMRANGE, boost, scoring);
		p->fs = fs;
		p->terms = cm_calloc(CM_MEM_SEARCH, 2, sizeof(sr_bytes));
		p->nterms = 2;
		const char *lo = q->gte ? q->gte : q->gt, *hi = q->lte ? q->lte : q->lt;
		if (lo) {
			char *s = norm_value(q, fs, lo);
			p->terms[0] = bytes_dup(s, strlen(s));
			cm_free(CM_MEM_SEARCH, s);
		}
		if (hi) {
			char *s = norm_value(q, fs, hi);
			p->terms[1] = bytes_dup(s, strlen(s));
			cm_free(CM_MEM_SEARCH, s);
		}
		p->lo_incl = q->gte != NULL;
		p->hi_incl = q->lte != NULL;
		*out = p;
		return CM_OK;
	}
	sr_plan *p = plan_new(P_COLUMN, boost, scoring);
	p->fs = fs;
	p->lo = INT64_MIN;
	p->hi = INT64_MAX;
	if (st_field_type_is_double(fs->type)) {
		p->lo = st_double_to_sortable(-INFINITY);
		p->hi = st_double_to_sortable(INFINITY);
	}
	struct {
		const char *v;
		bound_kind k;
	} b[4] = {{q->gt, B_GT}, {q->gte, B_GTE}, {q->lt, B_LT}, {q->lte, B_LTE}};
	bool empty = false;
	/* without a "format", a date bound reads as the field's mapping format
	 * (as ES), else as the default one */
	const char *mfmt = q->format;
	if (!mfmt && (fs->type == ST_FT_DATE || fs->type == ST_FT_DATE_NANOS)) {
		const st_mapping *m = st_reader_mapping(c->x->reader);
		const st_field_def *d = m ? st_mapping_find(m, q->field) : NULL;
		mfmt = d ? d->format : NULL;
	}
	for (int i = 0; i < 4; i++) {
		if (!b[i].v)
			continue;
		int64_t v;
		int r = column_bound(fs, b[i].v, b[i].k, mfmt, q->time_zone, &v);
		if (r < 0 && mfmt && !q->format)
			r = column_bound(fs, b[i].v, b[i].k, NULL, q->time_zone, &v);
		if (r < 0) {
			sr_plan_free(p);
			if (c->lenient) {
				*out = none();
				return CM_OK;
			}
			return value_error(c, fs, b[i].v);
		}
		if (r == 0) {
			empty = true;
			continue;
		}
		if (b[i].k == B_GT || b[i].k == B_GTE) {
			if (v > p->lo)
				p->lo = v;
		} else if (v < p->hi) {
			p->hi = v;
		}
	}
	if (empty || p->lo > p->hi) {
		sr_plan_free(p);
		*out = none();
		return CM_OK;
	}
	*out = p;
	return CM_OK;
}

static cm_err
multi_field_error(cctx *c, const char *what, const sr_fstat *fs)
{
	if (c->lenient)
		return CM_OK;
	return cm_error_set_type(
	    c->err, CM_EINVAL, "query_shard_exception",
	    "Can only use %s queries on keyword and text fields - not on [%s] "
	    "which is of type [%s]",
	    what, fs->name,
	    st_field_type_name(st_field_type_is_range(fs->range_type) ? fs->range_type : fs->type));
}

static cm_err
compile_multi(cctx *c, const sr_query *q, const sr_fstat *fs, float boost, bool scoring,
              sr_plan **out)
{
	*out = NULL;
	if (!fs) {
		*out = none();
		return CM_OK;
	}
	const char *what = q->kind == SR_Q_PREFIX     ? "prefix"
	                   : q->kind == SR_Q_WILDCARD ? "wildcard"
	                                              : "regexp";
	if (!is_text_like(fs->type) || st_field_type_is_range(fs->range_type)) {
		cm_err rc = multi_field_error(c, what, fs);
		if (!rc)
			*out = none();
		return rc;
	}
	char *v = norm_value(q, fs, q->value);
	sr_plan *p = plan_new(P_MULTI, boost, scoring);
	p->fs = fs;
	cm_err rc = CM_OK;
	if (q->kind == SR_Q_PREFIX && !q->case_insensitive) {
		p->terms = cm_calloc(CM_MEM_SEARCH, 1, sizeof(sr_bytes));
		p->terms[0] = bytes_dup(v, strlen(v));
		p->nterms = 1;
	} else if (q->kind == SR_Q_PREFIX) {
		char *pat;
		escape_literal(v, &pat);
		size_t n = strlen(pat);
		pat = cm_realloc(CM_MEM_SEARCH, pat, n + 2);
		pat[n] = '*';
		pat[n + 1] = 0;
		rc = sr_dfa_wildcard(pat, true, &p->dfa, c->err);
		cm_free(CM_MEM_SEARCH, pat);
	} else if (q->kind == SR_Q_WILDCARD) {
		rc = sr_dfa_wildcard(v, q->case_insensitive, &p->dfa, c->err);
	} else {
		int maxst = q->max_determinized_states > 0 ? q->max_determinized_states
		                                           : SR_MAX_DET_STATES;
		rc = sr_dfa_regexp(v, q->case_insensitive, maxst, &p->dfa, c->err);
	}
	cm_free(CM_MEM_SEARCH, v);
	if (rc) {
		sr_plan_free(p);
		return rc;
	}
	*out = p;
	return CM_OK;
}

/* ---- shard-wide term expansion ---- */

typedef struct termlist {
	sr_bytes *t;
	uint64_t *df;
	float *boost;
	size_t n, cap;
} termlist;

static void
termlist_add(termlist *l, const uint8_t *t, size_t n, uint32_t df, float boost)
{
	for (size_t i = 0; i < l->n; i++) {
		if (l->t[i].n == n && !memcmp(l->t[i].p, t, n)) {
			l->df[i] += df;
			return;
		}
	}
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 16;
		l->t = cm_realloc(CM_MEM_SEARCH, l->t, l->cap * sizeof(sr_bytes));
		l->df = cm_realloc(CM_MEM_SEARCH, l->df, l->cap * sizeof(uint64_t));
		l->boost = cm_realloc(CM_MEM_SEARCH, l->boost, l->cap * sizeof(float));
	}
	l->t[l->n] = bytes_dup(t, n);
	l->df[l->n] = df;
	l->boost[l->n] = boost;
	l->n++;
}

static void
termlist_free(termlist *l)
{
	bytes_free(l->t, l->n);
	cm_free(CM_MEM_SEARCH, l->df);
	cm_free(CM_MEM_SEARCH, l->boost);
}

static int
bytes_cmp(const sr_bytes *a, const sr_bytes *b)
{
	size_t n = a->n < b->n ? a->n : b->n;
	int r = memcmp(a->p, b->p, n);
	return r ? r : (a->n > b->n) - (a->n < b->n);
}

/* Best first: higher boost, then smaller term. */
static void
termlist_sort(termlist *l, bool by_boost)
{
	for (size_t i = 1; i < l->n; i++) {
		sr_bytes t = l->t[i];
		uint64_t df = l->df[i];
		float b = l->boost[i];
		size_t j = i;
		while (j) {
			bool before = by_boost && b != l->boost[j - 1] ? b > l->boost[j - 1]
			                                               : bytes_cmp(&t, &l->t[j - 1]) < 0;
			if (!before)
				break;
			l->t[j] = l->t[j - 1];
			l->df[j] = l->df[j - 1];
			l->boost[j] = l->boost[j - 1];
			j--;
		}
		l->t[j] = t;
		l->df[j] = df;
		l->boost[j] = b;
	}
}

static void
termlist_truncate(termlist *l, size_t n)
{
	for (size_t i = n; i < l->n; i++)
		cm_free(CM_MEM_SEARCH, l->t[i].p);
	if (l->n > n)
		l->n = n;
}

typedef struct fuzzy_spec {
	const uint8_t *v;
	size_t vlen, vcp;
	int max_edits;
	bool transpositions;
} fuzzy_spec;

/* Scans each segment's terms from prefix while they keep it; for fuzzy,
 * keeps those within the edit distance with Lucene's similarity boost. */
static cm_err
expand_terms(cctx *c, const sr_fstat *fs, const uint8_t *prefix, size_t plen, const fuzzy_spec *fz,
             size_t limit_sorted, termlist *out)
{
	sr_exec *x = c->x;
	for (size_t si = 0; si < x->nseg; si++) {
		const st_field_info *fi = st_segment_field(x->segs[si].seg, fs->name);
		if (!fi || !(fi->flags & ST_FI_POSTINGS))
			continue;
		st_terms *it;
		cm_err rc = st_terms_open(x->segs[si].txn, fi, &it);
		if (rc)
			return cm_error_set(c->err, rc, "cannot read terms of [%s]", fs->name);
		size_t seen = 0, taken = 0;
		for (bool ok = st_terms_seek(it, plen ? prefix : NULL, plen); ok; ok = st_terms_next(it)) {
			size_t tl;
			const uint8_t *t = st_terms_term(it, &tl);
			if (tl < plen || memcmp(t, prefix, plen))
				break;
			if ((++seen & 1023) == 0 && sr_deadline_passed(x))
				break;
			if (fz) {
				size_t tcp = sr_utf8_len(t, tl);
				if ((tcp > fz->vcp ? tcp - fz->vcp : fz->vcp - tcp) > (size_t)fz->max_edits)
					continue;
				int ed = sr_edit_distance(fz->v, fz->vlen, t, tl, fz->max_edits, fz->transpositions);
				if (ed > fz->max_edits)
					continue;
				size_t mn = tcp < fz->vcp ? tcp : fz->vcp;
				float boost = ed == 0 ? 1.0f : mn ? 1.0f - (float)ed / (float)mn : 0.0f;
				termlist_add(out, t, tl, st_terms_doc_freq(it), boost);
			} else {
				termlist_add(out, t, tl, st_terms_doc_freq(it), 1.0f);
				if (limit_sorted && ++taken >= limit_sorted)
					break;
			}
		}
		st_terms_close(it);
	}
	return CM_OK;
}

static int
auto_edits(const char *fuzziness, size_t cp_len)
{
	if (!fuzziness)
		return 0;
	if (!strncasecmp(fuzziness, "AUTO", 4)) {
		int lo = 3, hi = 6;
		if (fuzziness[4] == ':')
			sscanf(fuzziness + 5, "%d,%d", &lo, &hi);
		return cp_len < (size_t)lo ? 0 : cp_len < (size_t)hi ? 1 : 2;
	}
	double d = atof(fuzziness);
	int e = (int)d;
	return e < 0 ? 0 : e > 2 ? 2 : e;
}

int
sr_fuzzy_edits(const char *fuzziness, size_t cp_len)
{
	return auto_edits(fuzziness ? fuzziness : "AUTO", cp_len);
}

/* Lucene FuzzyQuery with TopTermsBlendedFreqScoringRewrite: the best
 * max_expansions terms by similarity, each scored with the largest df
 * among them, combined as dis_max with tie breaker 0.01. */
static cm_err
fuzzy_plan(cctx *c, const sr_fstat *fs, const char *value, const char *fuzziness, int prefix_length,
           int max_expansions, bool transpositions, float boost, bool scoring, sr_plan **out)
{
	const uint8_t *v = (const uint8_t *)value;
	size_t vlen = strlen(value), vcp = sr_utf8_len(v, vlen);
	int edits = auto_edits(fuzziness ? fuzziness : "AUTO", vcp);
	if (edits == 0) {
		*out = term_plan(c->x, fs, v, vlen, boost, scoring);
		return CM_OK;
	}
	/* prefix_length code points */
	size_t plen = 0, k = 0;
	while (plen < vlen && (int)k < prefix_length) {
		plen++;
		while (plen < vlen && (v[plen] & 0xC0) == 0x80)
			plen++;
		k++;
	}
	fuzzy_spec fz = {v, vlen, vcp, edits, transpositions};
	termlist l = {0};
	cm_err rc = expand_terms(c, fs, v, plen, &fz, 0, &l);
	if (rc) {
		termlist_free(&l);
		return rc;
	}
	termlist_sort(&l, true);
	termlist_truncate(&l, max_expansions > 0 ? (size_t)max_expansions : 50);
	if (!l.n) {
		termlist_free(&l);
		*out = none();
		return CM_OK;
	}
	uint64_t maxdf = 0;
	for (size_t i = 0; i < l.n; i++)
		if (l.df[i] > maxdf)
			maxdf = l.df[i];
	float idf = sr_idf(maxdf, fs->doc_count);
	sr_plan *d = plan_new(P_DISMAX, boost, scoring);
	d->tie = 0.01f;
	for (size_t i = 0; i < l.n; i++) {
		sr_plan *t = plan_new(P_TERM, boost * l.boost[i], scoring);
		t->fs = fs;
		t->term = l.t[i];
		l.t[i].p = NULL;
		t->weight = boost * l.boost[i] * idf;
		plan_add(d, t, OCC_SHOULD);
	}
	termlist_free(&l);
	*out = d;
	return CM_OK;
}

/* ---- analysis ---- */

typedef struct tok {
	sr_bytes t;
	uint32_t pos;
} tok;

typedef struct toks {
	tok *v;
	size_t n, cap;
	bool overflow;
} toks;

static int
tok_cb(void *ctx, const st_token *t)
{
	toks *ts = ctx;
	if (ts->n >= SR_MAX_CLAUSES) {
		ts->overflow = true;
		return 1;
	}
	if (ts->n == ts->cap) {
		ts->cap = ts->cap ? ts->cap * 2 : 8;
		ts->v = cm_realloc(CM_MEM_SEARCH, ts->v, ts->cap * sizeof(tok));
	}
	ts->v[ts->n].t = bytes_dup(t->term, t->len);
	ts->v[ts->n].pos = t->position;
	ts->n++;
	return 0;
}

static void
toks_free(toks *ts)
{
	for (size_t i = 0; i < ts->n; i++)
		cm_free(CM_MEM_SEARCH, ts->v[i].t.p);
	cm_free(CM_MEM_SEARCH, ts->v);
}

static cm_err
analyze(cctx *c, const sr_query *q, const sr_fstat *fs, toks *ts)
{
	memset(ts, 0, sizeof *ts);
	const char *v = q->value ? q->value : "";
	st_analyzer_kind an = fs->type == ST_FT_TEXT ? fs->analyzer : ST_AN_KEYWORD;
	const st_analyzer *custom = fs->type == ST_FT_TEXT ? fs->custom_analyzer : fs->normalizer;
	const st_mapping *m = st_reader_mapping(c->x->reader);
	if (q->analyzer && !st_analysis_resolve(m ? m->analysis : NULL, q->analyzer, &an, &custom))
		return cm_error_set(c->err, CM_EINVAL, "analyzer [%s] not found", q->analyzer);
	cm_err rc = st_analyze_with(custom, an, v, strlen(v), 0, tok_cb, ts, NULL);
	if (!rc && ts->overflow)
		rc = cm_error_set_type(c->err, CM_ELIMIT, "too_many_clauses",
		                       "maxClauseCount is set to %d", SR_MAX_CLAUSES);
	if (rc) {
		toks_free(ts);
		if (!c->err->code)
			cm_error_set(c->err, rc, "analysis failed");
	}
	return rc;
}

static sr_plan *
zero_terms(const sr_query *q, float boost)
{
	return q->zero_terms_all ? plan_new(P_ALL, boost, true) : none();
}

/* A prefix over the terms dictionary, scored as a constant (Lucene's
 * PrefixQuery with its default constant-score rewrite). */
static sr_plan *
prefix_plan(const sr_fstat *fs, const uint8_t *t, size_t n, float boost, bool scoring)
{
	sr_plan *p = plan_new(P_MULTI, boost, scoring);
	p->fs = fs;
	p->terms = cm_calloc(CM_MEM_SEARCH, 1, sizeof(sr_bytes));
	p->terms[0] = bytes_dup(t, n);
	p->nterms = 1;
	return p;
}

/* match, and match_bool_prefix (the same with its last term a prefix) */
static cm_err
compile_match(cctx *c, const sr_query *q, const sr_fstat *fs, float boost, bool scoring,
              sr_plan **out)
{
	if (!fs) {
		*out = none();
		return CM_OK;
	}
	if (!is_text_like(fs->type) || st_field_type_is_range(fs->range_type)) {
		sr_query t = *q;
		t.kind = SR_Q_TERM;
		t.case_insensitive = false;
		return compile_term(c, &t, fs, boost, scoring, out);
	}
	toks ts;
	cm_err rc = analyze(c, q, fs, &ts);
	if (rc)
		return rc;
	if (!ts.n) {
		*out = zero_terms(q, boost);
		toks_free(&ts);
		return CM_OK;
	}
	/* tokens sharing a position (synonyms) are one clause: any of them */
	size_t ngroups = 0;
	for (size_t i = 0; i < ts.n; i++)
		ngroups += i == 0 || ts.v[i].pos != ts.v[i - 1].pos;
	/* match_bool_prefix: the tokens of the last position are prefixes */
	bool prefix_last = q->kind == SR_Q_MATCH_BOOL_PREFIX;
	size_t last_start = ts.n - 1;
	while (last_start && ts.v[last_start - 1].pos == ts.v[ts.n - 1].pos)
		last_start--;
	sr_plan *b = ngroups > 1 ? plan_new(P_BOOL, boost, scoring) : NULL;
	sr_plan *group = NULL;
	for (size_t i = 0; i < ts.n && !rc; i++) {
		sr_plan *t;
		if (prefix_last && i >= last_start)
			t = prefix_plan(fs, ts.v[i].t.p, ts.v[i].t.n, boost, scoring);
		else if (q->fuzziness)
			rc = fuzzy_plan(c, fs, (const char *)ts.v[i].t.p, q->fuzziness, q->prefix_length,
			                q->max_expansions, true, boost, scoring, &t);
		else
			t = term_plan(c->x, fs, ts.v[i].t.p, ts.v[i].t.n, boost, scoring);
		if (rc)
			break;
		bool same_next = i + 1 < ts.n && ts.v[i + 1].pos == ts.v[i].pos;
		bool same_prev = i > 0 && ts.v[i - 1].pos == ts.v[i].pos;
		if (same_next || same_prev) {
			if (!same_prev) {
				group = plan_new(P_BOOL, boost, scoring);
				group->msm = 1;
			}
			plan_add(group, t, OCC_SHOULD);
			if (same_next)
				continue;
			t = group;
			group = NULL;
		}
		if (!b) {
			*out = t;
			break;
		}
		plan_add(b, t, q->op_and ? OCC_MUST : OCC_SHOULD);
	}
	sr_plan_free(group);
	toks_free(&ts);
	if (rc) {
		sr_plan_free(b);
		return rc;
	}
	if (b) {
		if (!q->op_and) {
			rc = resolve_msm(c, q->minimum_should_match, (int)b->nkids, &b->msm);
			if (rc) {
				sr_plan_free(b);
				return rc;
			}
			if (b->msm < 1)
				b->msm = 1;
		}
		*out = b;
	}
	return CM_OK;
}

/* A phrase whose positions may hold several terms (synonyms). */
static cm_err
compile_multi_phrase(cctx *c, const sr_query *q, const sr_fstat *fs, toks *ts, float boost,
                     bool scoring, sr_plan **out)
{
	size_t nslots = 0;
	for (size_t i = 0; i < ts->n; i++)
		nslots += i == 0 || ts->v[i].pos != ts->v[i - 1].pos;
	sr_plan *p = plan_new(P_PHRASE, boost, scoring);
	p->fs = fs;
	p->slop = q->slop;
	p->npos = (uint32_t)nslots;
	p->pos_offset = cm_calloc(CM_MEM_SEARCH, nslots, sizeof(uint32_t));
	p->pos_terms = cm_calloc(CM_MEM_SEARCH, nslots, sizeof(sr_bytes *));
	p->pos_nterms = cm_calloc(CM_MEM_SEARCH, nslots, sizeof(size_t));
	double idf = 0;
	size_t slot = 0;
	for (size_t i = 0; i < ts->n; slot++) {
		size_t j = i;
		while (j < ts->n && ts->v[j].pos == ts->v[i].pos)
			j++;
		p->pos_offset[slot] = ts->v[i].pos - ts->v[0].pos;
		p->pos_terms[slot] = cm_calloc(CM_MEM_SEARCH, j - i, sizeof(sr_bytes));
		double slot_idf = 0;
		for (size_t k = i; k < j; k++) {
			p->pos_terms[slot][k - i] = ts->v[k].t;
			ts->v[k].t.p = NULL;
			if (scoring) {
				const sr_bytes *t = &p->pos_terms[slot][k - i];
				double f = sr_idf(term_df(c->x, fs, t->p, t->n), fs->doc_count);
				slot_idf = f > slot_idf ? f : slot_idf;
			}
		}
		p->pos_nterms[slot] = j - i;
		idf += slot_idf;
		i = j;
	}
	p->weight = boost * (float)idf;
	*out = p;
	return CM_OK;
}

static cm_err
compile_phrase(cctx *c, const sr_query *q, const sr_fstat *fs, float boost, bool scoring,
               bool prefix, sr_plan **out)
{
	if (!fs) {
		*out = none();
		return CM_OK;
	}
	if (!is_text_like(fs->type) || st_field_type_is_range(fs->range_type)) {
		sr_query t = *q;
		t.kind = SR_Q_TERM;
		return compile_term(c, &t, fs, boost, scoring, out);
	}
	toks ts;
	cm_err rc = analyze(c, q, fs, &ts);
	if (rc)
		return rc;
	if (!ts.n) {
		*out = zero_terms(q, boost);
		toks_free(&ts);
		return CM_OK;
	}
	termlist ex = {0};
	if (prefix) {
		sr_bytes *last = &ts.v[ts.n - 1].t;
		rc = expand_terms(c, fs, last->p, last->n, NULL,
		                  q->max_expansions > 0 ? (size_t)q->max_expansions : 50, &ex);
		if (rc)
			goto done;
		termlist_sort(&ex, false);
		termlist_truncate(&ex, q->max_expansions > 0 ? (size_t)q->max_expansions : 50);
		if (!ex.n) {
			*out = none();
			goto done;
		}
	}
	if (ts.n == 1 && !prefix) {
		*out = term_plan(c->x, fs, ts.v[0].t.p, ts.v[0].t.n, boost, scoring);
		goto done;
	}
	if (ts.n == 1) {
		/* MultiPhraseQuery with one position rewrites to a disjunction */
		sr_plan *b = plan_new(P_BOOL, boost, scoring);
		for (size_t i = 0; i < ex.n; i++)
			plan_add(b, term_plan(c->x, fs, ex.t[i].p, ex.t[i].n, boost, scoring), OCC_SHOULD);
		b->msm = 1;
		*out = b;
		goto done;
	}
	if (!(fs->flags & ST_FI_POSITIONS)) {
		rc = cm_error_set_type(c->err, CM_EINVAL, "query_shard_exception",
		                       "field:[%s] was indexed without position data; cannot run "
		                       "PhraseQuery",
		                       fs->name);
		goto done;
	}
	/* synonyms: the tokens of one position become one slot of several
	 * terms (Lucene's MultiPhraseQuery) */
	bool stacked = false;
	for (size_t i = 1; i < ts.n; i++)
		stacked |= ts.v[i].pos == ts.v[i - 1].pos;
	if (stacked && !prefix) {
		rc = compile_multi_phrase(c, q, fs, &ts, boost, scoring, out);
		goto done;
	}
	sr_plan *p = plan_new(P_PHRASE, boost, scoring);
	p->fs = fs;
	p->slop = q->slop;
	p->npos = (uint32_t)ts.n;
	p->pos_offset = cm_calloc(CM_MEM_SEARCH, ts.n, sizeof(uint32_t));
	p->pos_terms = cm_calloc(CM_MEM_SEARCH, ts.n, sizeof(sr_bytes *));
	p->pos_nterms = cm_calloc(CM_MEM_SEARCH, ts.n, sizeof(size_t));
	double idf = 0;
	for (size_t i = 0; i < ts.n; i++) {
		p->pos_offset[i] = ts.v[i].pos - ts.v[0].pos;
		if (prefix && i == ts.n - 1) {
			p->pos_terms[i] = cm_calloc(CM_MEM_SEARCH, ex.n, sizeof(sr_bytes));
			for (size_t k = 0; k < ex.n; k++) {
				p->pos_terms[i][k] = bytes_dup(ex.t[k].p, ex.t[k].n);
				if (scoring)
					idf += sr_idf(ex.df[k], fs->doc_count);
			}
			p->pos_nterms[i] = ex.n;
		} else {
			p->pos_terms[i] = cm_calloc(CM_MEM_SEARCH, 1, sizeof(sr_bytes));
			p->pos_terms[i][0] = ts.v[i].t;
			ts.v[i].t.p = NULL;
			p->pos_nterms[i] = 1;
			if (scoring)
				idf += sr_idf(term_df(c->x, fs, p->pos_terms[i][0].p, p->pos_terms[i][0].n),
				              fs->doc_count);
		}
	}
	p->weight = boost * (float)idf;
	*out = p;
done:
	termlist_free(&ex);
	toks_free(&ts);
	return rc;
}

/* ---- intervals ---- */

#define IV_MAX_EXPANSIONS 128 /* Lucene's Intervals.prefix/wildcard/fuzzy limit */

static sr_ivnode *
ivnode_new(sr_ivn_kind kind, const sr_fstat *fs)
{
	sr_ivnode *n = cm_calloc(CM_MEM_SEARCH, 1, sizeof *n);
	n->kind = kind;
	n->fs = fs;
	n->max_gaps = -1;
	return n;
}

static void
ivnode_add(sr_ivnode *n, sr_ivnode *kid)
{
	n->kids = cm_realloc(CM_MEM_SEARCH, n->kids, (n->nkids + 1) * sizeof(*n->kids));
	n->kids[n->nkids++] = kid;
}

static void
ivnode_term(sr_ivnode *n, const uint8_t *t, size_t len)
{
	n->terms = cm_realloc(CM_MEM_SEARCH, n->terms, (n->nterms + 1) * sizeof(sr_bytes));
	n->terms[n->nterms++] = bytes_dup(t, len);
}

/* A rule's terms in the dictionary: prefix, wildcard or fuzzy. */
static cm_err
iv_expand(cctx *c, const sr_interval *r, const sr_fstat *fs, sr_ivnode *n)
{
	sr_query nq = {.value = r->text, .analyze_multiterm = true};
	char *v = norm_value(&nq, fs, r->text);
	termlist l = {0};
	sr_dfa *dfa = NULL;
	cm_err rc = CM_OK;
	if (r->kind == SR_IV_PREFIX) {
		rc = expand_terms(c, fs, (const uint8_t *)v, strlen(v), NULL, 0, &l);
	} else if (r->kind == SR_IV_WILDCARD) {
		rc = sr_dfa_wildcard(v, false, &dfa, c->err);
		size_t plen = 0;
		const char *pre = rc ? NULL : sr_dfa_prefix(dfa, &plen);
		if (!rc)
			rc = expand_terms(c, fs, (const uint8_t *)pre, plen, NULL, 0, &l);
		size_t k = 0;
		for (size_t i = 0; i < l.n && !rc; i++) {
			if (sr_dfa_match(dfa, l.t[i].p, l.t[i].n)) {
				l.t[k] = l.t[i];
				l.df[k] = l.df[i];
				l.boost[k++] = l.boost[i];
			} else {
				cm_free(CM_MEM_SEARCH, l.t[i].p);
			}
		}
		if (!rc)
			l.n = k;
	} else {
		const uint8_t *u = (const uint8_t *)v;
		size_t vlen = strlen(v), vcp = sr_utf8_len(u, vlen);
		size_t plen = 0, k = 0;
		while (plen < vlen && (int)k < r->prefix_length) {
			plen++;
			while (plen < vlen && (u[plen] & 0xC0) == 0x80)
				plen++;
			k++;
		}
		fuzzy_spec fz = {u, vlen, vcp, sr_fuzzy_edits(r->fuzziness, vcp),
		                 r->transpositions};
		rc = expand_terms(c, fs, u, plen, &fz, 0, &l);
		termlist_sort(&l, true);
		termlist_truncate(&l, IV_MAX_EXPANSIONS);
	}
	if (!rc && l.n > IV_MAX_EXPANSIONS)
		rc = cm_error_set(c->err, CM_EINVAL, "[%s] expanded to too many terms (limit %d)",
		                  r->text, IV_MAX_EXPANSIONS);
	for (size_t i = 0; i < l.n && !rc; i++)
		ivnode_term(n, l.t[i].p, l.t[i].n);
	termlist_free(&l);
	sr_dfa_free(dfa);
	cm_free(CM_MEM_SEARCH, v);
	return rc;
}

/* match: the analyzed text's positions, one leaf each (the tokens of one
 * position are alternatives), combined as the rule says. */
static cm_err
iv_match(cctx *c, const sr_interval *r, const sr_fstat *fs, sr_ivnode **out)
{
	sr_query aq = {.value = r->text, .analyzer = r->analyzer};
	toks ts;
	cm_err rc = analyze(c, &aq, fs, &ts);
	if (rc)
		return rc;
	sr_ivnode *comb = ivnode_new(r->ordered ? SR_IVN_ORDERED : SR_IVN_UNORDERED, NULL);
	comb->max_gaps = r->max_gaps;
	sr_ivnode *leaf = NULL;
	for (size_t i = 0; i < ts.n; i++) {
		if (!leaf || ts.v[i].pos != ts.v[i - 1].pos) {
			leaf = ivnode_new(SR_IVN_TERMS, fs);
			ivnode_add(comb, leaf);
		}
		ivnode_term(leaf, ts.v[i].t.p, ts.v[i].t.n);
	}
	toks_free(&ts);
	if (comb->nkids == 1) { /* one position: its terms alone */
		*out = comb->kids[0];
		comb->nkids = 0;
		sr_ivnode_free(comb);
	} else if (!comb->nkids) { /* nothing to match */
		sr_ivnode_free(comb);
		*out = ivnode_new(SR_IVN_TERMS, fs);
	} else {
		*out = comb;
	}
	return CM_OK;
}

static cm_err
compile_iv(cctx *c, const sr_interval *r, const sr_fstat *fs, int depth, sr_ivnode **out)
{
	*out = NULL;
	if (depth > 64)
		return cm_error_set(c->err, CM_ELIMIT, "[intervals] rules nested too deeply");
	cm_err rc = CM_OK;
	if (r->use_field && r->kind <= SR_IV_FUZZY) {
		fs = field_or_null(c, r->use_field);
		if (fs && fs->type != ST_FT_TEXT)
			return cm_error_set(
			    c->err, CM_EINVAL,
			    "Cannot create intervals over field [%s] with no positions "
			    "indexed",
			    fs->name);
	}
	sr_ivnode *n = NULL;
	switch (r->kind) {
	case SR_IV_MATCH:
		if (fs)
			rc = iv_match(c, r, fs, &n);
		else
			n = ivnode_new(SR_IVN_TERMS, NULL);
		break;
	case SR_IV_PREFIX:
	case SR_IV_WILDCARD:
	case SR_IV_FUZZY:
		n = ivnode_new(SR_IVN_TERMS, fs);
		if (fs)
			rc = iv_expand(c, r, fs, n);
		break;
	case SR_IV_ALL_OF:
	case SR_IV_ANY_OF:
		n = ivnode_new(r->kind == SR_IV_ANY_OF ? SR_IVN_OR
		               : r->ordered            ? SR_IVN_ORDERED
		                                       : SR_IVN_UNORDERED,
		               NULL);
		n->max_gaps = r->kind == SR_IV_ALL_OF ? r->max_gaps : -1;
		for (size_t i = 0; i < r->nkids && !rc; i++) {
			sr_ivnode *k;
			rc = compile_iv(c, r->kids[i], fs, depth + 1, &k);
			if (!rc)
				ivnode_add(n, k);
		}
		break;
	}
	if (!rc && r->filter_rule) {
		n->filter = r->filter;
		rc = compile_iv(c, r->filter_rule, fs, depth + 1, &n->filter_node);
	}
	if (rc) {
		sr_ivnode_free(n);
		return rc;
	}
	*out = n;
	return CM_OK;
}

static cm_err
compile_intervals(cctx *c, const sr_query *q, const sr_fstat *fs, float boost, bool scoring,
                  sr_plan **out)
{
	if (fs && !is_text_like(fs->type))
		return cm_error_set(
		    c->err, CM_EINVAL,
		    "Can only use interval queries on text fields - not on [%s] which "
		    "is of type [%s]",
		    fs->name, st_field_type_name(fs->type));
	if (fs && fs->type != ST_FT_TEXT)
		return cm_error_set(
		    c->err, CM_EINVAL,
		    "Cannot create intervals over field [%s] with no positions indexed", fs->name);
	sr_ivnode *n;
	cm_err rc = compile_iv(c, q->intervals, fs, 0, &n);
	if (rc)
		return rc;
	sr_plan *p = plan_new(P_INTERVALS, boost, scoring);
	p->fs = fs;
	p->iv = n;
	p->weight = boost;
	*out = p;
	return CM_OK;
}

/* Compiles a field-level query over a pattern: dis_max over the fields. */
static cm_err
compile_over_fields(cctx *c, const sr_query *q, char *const *fields, const float *fboosts,
                    size_t nf, float tie, bool sum, float boost, bool scoring, sr_plan **out)
{
	sr_plan *d = plan_new(sum ? P_BOOL : P_DISMAX, boost, scoring);
	d->tie = tie;
	bool saved = c->lenient;
	for (size_t i = 0; i < nf; i++) {
		const char *f = fields[i];
		float fb = fboosts ? fboosts[i] : 1.0f;
		char name[512];
		snprintf(name, sizeof name, "%s", f);
		char *caret = strchr(name, '^');
		if (caret) {
			fb *= (float)atof(caret + 1);
			*caret = 0;
		}
		const sr_fstat *list[256];
		size_t n;
		if (is_pattern(name)) {
			n = fields_matching(c->x, name, list, 256);
			c->lenient = true;
		} else {
			list[0] = sr_exec_field(c->x, name);
			n = list[0] ? 1 : 0;
		}
		for (size_t k = 0; k < n; k++) {
			sr_query t = *q;
			t.field = list[k]->name;
			t.boost = 1.0f;
			if (t.kind == SR_Q_MULTI_MATCH) {
				const char *ty = q->multi_type ? q->multi_type : "best_fields";
				t.kind = !strcmp(ty, "phrase")          ? SR_Q_MATCH_PHRASE
				         : !strcmp(ty, "phrase_prefix") ? SR_Q_MATCH_PHRASE_PREFIX
				         : !strcmp(ty, "bool_prefix")   ? SR_Q_MATCH_BOOL_PREFIX
				                                        : SR_Q_MATCH;
			}
			if (!is_text_like(list[k]->type) && c->lenient && t.kind != SR_Q_EXISTS &&
			    t.kind != SR_Q_RANGE && t.kind != SR_Q_TERM && t.kind != SR_Q_TERMS &&
			    t.kind != SR_Q_MATCH)
				continue;
			sr_plan *kid;
			cm_err rc = compile(c, &t, boost * fb, scoring, &kid);
			if (rc) {
				c->lenient = saved;
				sr_plan_free(d);
				return rc;
			}
			plan_add(d, kid, OCC_SHOULD);
		}
		c->lenient = saved;
	}
	if (!d->nkids) {
		sr_plan_free(d);
		*out = none();
		return CM_OK;
	}
	if (sum)
		d->msm = 1;
	*out = d;
	return CM_OK;
}

static cm_err
compile_bool(cctx *c, const sr_query *q, float boost, bool scoring, sr_plan **out)
{
	size_t total = q->nmust + q->nshould + q->nmust_not + q->nfilter;
	if (total > SR_MAX_CLAUSES)
		return cm_error_set_type(c->err, CM_ELIMIT, "too_many_clauses",
		                         "maxClauseCount is set to %d", SR_MAX_CLAUSES);
	if (!total) {
		*out = plan_new(P_ALL, boost, scoring);
		return CM_OK;
	}
	sr_plan *b = plan_new(P_BOOL, boost, scoring);
	struct {
		sr_query **v;
		size_t n;
		uint8_t occ;
	} groups[4] = {{q->must, q->nmust, OCC_MUST},
	               {q->should, q->nshould, OCC_SHOULD},
	               {q->must_not, q->nmust_not, OCC_MUST_NOT},
	               {q->filter, q->nfilter, OCC_FILTER}};
	for (int g = 0; g < 4; g++) {
		for (size_t i = 0; i < groups[g].n; i++) {
			bool sc = scoring && (groups[g].occ == OCC_MUST || groups[g].occ == OCC_SHOULD);
			sr_plan *k;
			cm_err rc = compile(c, groups[g].v[i], boost, sc, &k);
			if (rc) {
				sr_plan_free(b);
				return rc;
			}
			plan_add(b, k, groups[g].occ);
		}
	}
	cm_err rc = resolve_msm(c, q->minimum_should_match, (int)q->nshould, &b->msm);
	if (rc) {
		sr_plan_free(b);
		return rc;
	}
	if (!q->minimum_should_match && q->nshould && !q->nmust && !q->nfilter)
		b->msm = 1;
	if (q->nshould && !q->nmust && !q->nfilter && b->msm < 1)
		b->msm = 1;
	*out = b;
	return CM_OK;
}

static cm_err compile(cctx *c, const sr_query *q, float boost, bool scoring, sr_plan **out);

/* nested: the inner query runs over the nested docs of the path and
 * matches their parents (the root docs, or the enclosing nested query's
 * docs). */
static cm_err
compile_nested(cctx *c, const sr_query *q, float boost, bool scoring, sr_plan **out)
{
	const st_mapping *m = st_reader_mapping(c->x->reader);
	const st_field_def *d = m ? st_mapping_find(m, q->field) : NULL;
	if (d == NULL) {
		if (q->ignore_unmapped) {
			*out = none();
			return CM_OK;
		}
		return cm_error_set_type(c->err, CM_EINVAL, "query_shard_exception",
		                         "[nested] failed to find nested object under path [%s]",
		                         q->field);
	}
	if (d->type != ST_FT_OBJECT || !d->nested)
		return cm_error_set_type(c->err, CM_EINVAL, "query_shard_exception",
		                         "[nested] nested object under path [%s] is not of nested "
		                         "type",
		                         q->field);
	const char *saved = c->nest_path;
	c->nest_path = d->path;
	sr_plan *k = NULL;
	bool inner_scoring = scoring && q->score_mode != SR_NEST_NONE;
	cm_err rc = compile(c, q->inner, 1.0f, inner_scoring, &k);
	c->nest_path = saved;
	if (rc)
		return rc;
	sr_plan *p = plan_new(P_NESTED, boost, scoring);
	plan_add(p, k, OCC_MUST);
	p->nest_path = cm_strdup(CM_MEM_SEARCH, d->path);
	p->nest_parent = saved ? cm_strdup(CM_MEM_SEARCH, saved) : NULL;
	p->nest_mode = q->score_mode;
	*out = p;
	return CM_OK;
}

static cm_err
compile(cctx *c, const sr_query *q, float boost, bool scoring, sr_plan **out)
{
	*out = NULL;
	if (!q) {
		*out = plan_new(P_ALL, boost, scoring);
		return CM_OK;
	}
	if (++c->depth > 64) {
		c->depth--;
		return cm_error_set(c->err, CM_ELIMIT, "query nested too deeply");
	}
	bool saved_lenient = c->lenient;
	c->lenient |= q->lenient;
	float b = boost * (q->boost > 0 || q->boost < 0 ? q->boost : 1.0f);
	if (q->boost == 0)
		b = 0;
	cm_err rc = CM_OK;
	bool field_level = q->kind != SR_Q_MATCH_ALL && q->kind != SR_Q_MATCH_NONE &&
	                   q->kind != SR_Q_IDS && q->kind != SR_Q_BOOL &&
	                   q->kind != SR_Q_CONSTANT_SCORE && q->kind != SR_Q_DIS_MAX &&
	                   q->kind != SR_Q_BOOSTING && q->kind != SR_Q_QUERY_STRING &&
	                   q->kind != SR_Q_SIMPLE_QUERY_STRING && q->kind != SR_Q_MULTI_MATCH &&
	                   q->kind != SR_Q_NESTED;
	if (field_level && is_pattern(q->field) && q->kind != SR_Q_EXISTS) {
		char *f[1] = {q->field};
		rc = compile_over_fields(c, q, f, NULL, 1, 0.0f, false, b, scoring, out);
		c->depth--;
		c->lenient = saved_lenient;
		return rc;
	}
	const sr_fstat *fs = field_level ? field_or_null(c, q->field) : NULL;
	if (field_level && !q->field) {
		c->depth--;
		c->lenient = saved_lenient;
		return cm_error_set(c->err, CM_EPARSE, "[%s] query requires a field",
		                    sr_query_kind_name(q->kind));
	}
	if (fs && fs->type == ST_FT_GEO_POINT && q->kind != SR_Q_GEO_BOUNDING_BOX &&
	    q->kind != SR_Q_GEO_DISTANCE && q->kind != SR_Q_EXISTS) {
		/* lenient (a field pattern, query_string over every field): no match */
		bool lenient = c->lenient;
		c->depth--;
		c->lenient = saved_lenient;
		if (lenient) {
			*out = none();
			return CM_OK;
		}
		return cm_error_set(c->err, CM_EINVAL,
		                    "Geometry fields do not support exact searching, use dedicated "
		                    "geometry queries instead: [%s]",
		                    fs->name);
	}
	switch (q->kind) {
	case SR_Q_GEO_BOUNDING_BOX:
	case SR_Q_GEO_DISTANCE:
		if (!fs) {
			*out = none(); /* no value of the field here */
		} else if (fs->type != ST_FT_GEO_POINT) {
			rc = cm_error_set(c->err, CM_EINVAL,
			                  "failed to find geo field [%s]: it is of type [%s], not "
			                  "[geo_point]",
			                  fs->name, st_field_type_name(fs->type));
		} else {
			sr_plan *p = plan_new(P_GEO, b, scoring);
			p->fs = fs;
			p->geo_circle = q->kind == SR_Q_GEO_DISTANCE;
			memcpy(p->geo, q->geo, sizeof(p->geo));
			*out = p;
		}
		break;
	case SR_Q_MATCH_ALL:
		*out = plan_new(P_ALL, b, scoring);
		break;
	case SR_Q_MATCH_NONE:
		*out = none();
		break;
	case SR_Q_TERM:
		if (fs && q->analyze_multiterm && fs->type == ST_FT_TEXT) {
			sr_query t = *q;
			t.value = norm_value(q, fs, q->value);
			rc = compile_term(c, &t, fs, b, scoring, out);
			cm_free(CM_MEM_SEARCH, t.value);
		} else {
			rc = compile_term(c, q, fs, b, scoring, out);
		}
		break;
	case SR_Q_TERMS:
		rc = compile_terms(c, q, fs, b, scoring, out);
		break;
	case SR_Q_IDS:
		rc = compile_ids(c, q->values, q->nvalues, b, scoring, out);
		break;
	case SR_Q_EXISTS: {
		const sr_fstat *list[256];
		size_t n = 0;
		if (!strcmp(q->field, "_id") || !strcmp(q->field, "_index") ||
		    !strcmp(q->field, "_type")) {
			/* every document has them */
			*out = plan_new(P_ALL, b, scoring);
			break;
		}
		if (is_pattern(q->field)) {
			n = fields_matching(c->x, q->field, list, 256);
		} else if (fs) {
			list[n++] = fs;
		} else {
			/* an object path: its sub-fields */
			char pat[512];
			snprintf(pat, sizeof pat, "%s.*", q->field);
			n = fields_matching(c->x, pat, list, 256);
		}
		if (!n) {
			*out = none();
			break;
		}
		sr_plan *p = plan_new(P_EXISTS, b, scoring);
		p->fields = cm_malloc(CM_MEM_SEARCH, n * sizeof(sr_fstat *));
		memcpy(p->fields, list, n * sizeof(sr_fstat *));
		p->nfields = n;
		*out = p;
		break;
	}
	case SR_Q_RANGE:
		rc = compile_range(c, q, fs, b, scoring, out);
		break;
	case SR_Q_PREFIX:
	case SR_Q_WILDCARD:
	case SR_Q_REGEXP:
		rc = compile_multi(c, q, fs, b, scoring, out);
		break;
	case SR_Q_FUZZY:
		if (!fs) {
			*out = none();
		} else if (!is_text_like(fs->type) || st_field_type_is_range(fs->range_type)) {
			rc = multi_field_error(c, "fuzzy", fs);
			if (!rc)
				*out = none();
		} else {
			char *v = norm_value(q, fs, q->value);
			rc = fuzzy_plan(c, fs, v, q->fuzziness, q->prefix_length,
			                q->max_expansions ? q->max_expansions : 50, q->transpositions, b,
			                scoring, out);
			cm_free(CM_MEM_SEARCH, v);
		}
		break;
	case SR_Q_MATCH:
	case SR_Q_MATCH_BOOL_PREFIX:
		rc = compile_match(c, q, fs, b, scoring, out);
		break;
	case SR_Q_MATCH_PHRASE:
		rc = compile_phrase(c, q, fs, b, scoring, false, out);
		break;
	case SR_Q_MATCH_PHRASE_PREFIX:
		rc = compile_phrase(c, q, fs, b, scoring, true, out);
		break;
	case SR_Q_MULTI_MATCH: {
		const char *ty = q->multi_type ? q->multi_type : "best_fields";
		bool sum = !strcmp(ty, "most_fields");
		if (q->nvalues) {
			rc = compile_over_fields(c, q, q->values, q->field_boosts, q->nvalues,
			                         q->tie_breaker, sum, b, scoring, out);
		} else {
			char *all[1] = {"*"};
			rc = compile_over_fields(c, q, all, NULL, 1, q->tie_breaker, sum, b, scoring, out);
		}
		break;
	}
	case SR_Q_BOOL:
		rc = compile_bool(c, q, b, scoring, out);
		break;
	case SR_Q_CONSTANT_SCORE: {
		sr_plan *k;
		rc = compile(c, q->inner, 1.0f, false, &k);
		if (!rc) {
			sr_plan *p = plan_new(P_CONST, b, scoring);
			plan_add(p, k, OCC_FILTER);
			*out = p;
		}
		break;
	}
	case SR_Q_DIS_MAX: {
		sr_plan *p = plan_new(P_DISMAX, b, scoring);
		p->tie = q->tie_breaker;
		for (size_t i = 0; i < q->nqueries && !rc; i++) {
			sr_plan *k;
			rc = compile(c, q->queries[i], b, scoring, &k);
			if (!rc)
				plan_add(p, k, OCC_SHOULD);
		}
		if (rc)
			sr_plan_free(p);
		else if (!p->nkids) {
			sr_plan_free(p);
			*out = none();
		} else
			*out = p;
		break;
	}
	case SR_Q_BOOSTING: {
		sr_plan *pos = NULL, *neg = NULL;
		rc = compile(c, q->inner, b, scoring, &pos);
		if (!rc)
			rc = compile(c, q->negative, 1.0f, false, &neg);
		if (rc) {
			sr_plan_free(pos);
			sr_plan_free(neg);
			break;
		}
		sr_plan *p = plan_new(P_BOOSTING, b, scoring);
		p->neg_boost = q->negative_boost;
		plan_add(p, pos, OCC_MUST);
		plan_add(p, neg, OCC_FILTER);
		*out = p;
		break;
	}
	case SR_Q_NESTED:
		rc = compile_nested(c, q, b, scoring, out);
		break;
	case SR_Q_INTERVALS:
		rc = compile_intervals(c, q, fs, b, scoring, out);
		break;
	case SR_Q_QUERY_STRING:
	case SR_Q_SIMPLE_QUERY_STRING: {
		sr_query *t = NULL;
		rc = sr_query_string_expand(q, &t, c->err);
		if (!rc) {
			/* the expanded tree carries the node's boost itself */
			rc = compile(c, t, boost, scoring, out);
		}
		sr_query_free(t);
		break;
	}
	}
	c->depth--;
	c->lenient = saved_lenient;
	if (!rc && !*out)
		*out = none();
	return rc;
}

cm_err
sr_plan_compile_in(sr_exec *x, const sr_query *q, const char *nest_path, bool scoring,
                   sr_plan **out)
{
	cctx c = {x, x->err, false, 0, nest_path};
	cm_err rc = compile(&c, q, 1.0f, scoring, out);
	if (rc && !x->err->code)
		cm_error_set(x->err, rc, "%s", cm_err_msg(rc));
	return rc;
}

cm_err
sr_plan_compile(sr_exec *x, const sr_query *q, bool scoring, sr_plan **out)
{
	cctx c = {x, x->err, false, 0, NULL};
	cm_err rc = compile(&c, q, 1.0f, scoring, out);
	if (rc && !x->err->code)
		cm_error_set(x->err, rc, "%s", cm_err_msg(rc));
	return rc;
}
