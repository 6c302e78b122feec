/* The coordinator-facing half of search: DSL → query tree, query strings,
 * the _search request, _source filtering and the merge stage. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "check.h"
#include "search/jsonw.h"
#include "search/sr.h"
#include "search/sr_agg.h"

/* ---- a compact dump of a tree, so expectations read like the query ---- */

typedef struct sb {
	char buf[8192];
	size_t len;
} sb;

static void put(sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#include <stdarg.h>
static void
put(sb *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(b->buf + b->len, sizeof(b->buf) - b->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		b->len +=
		    (size_t)n < sizeof(b->buf) - b->len ? (size_t)n : sizeof(b->buf) - b->len - 1;
}

static void dump(sb *b, const sr_query *q);

static void
dump_iv(sb *b, const sr_interval *r)
{
	static const char *kinds[] = {"match", "prefix", "wildcard", "fuzzy", "all_of", "any_of"};
	put(b, "%s(", kinds[r->kind]);
	if (r->text)
		put(b, "%s", r->text);
	for (size_t i = 0; i < r->nkids; i++) {
		put(b, "%s", i ? "," : "");
		dump_iv(b, r->kids[i]);
	}
	if (r->ordered)
		put(b, ",ordered");
	if (r->max_gaps >= 0)
		put(b, ",gaps=%d", r->max_gaps);
	if (r->use_field)
		put(b, ",use=%s", r->use_field);
	if (r->fuzziness)
		put(b, ",fuzz=%s", r->fuzziness);
	if (r->filter_rule) {
		put(b, ",%s:", sr_iv_filter_name(r->filter));
		dump_iv(b, r->filter_rule);
	}
	put(b, ")");
}

static void
dump_list(sb *b, const char *prefix, sr_query **l, size_t n, bool *first)
{
	for (size_t i = 0; i < n; i++) {
		put(b, "%s%s", *first ? "" : ",", prefix);
		*first = false;
		dump(b, l[i]);
	}
}

static void
dump(sb *b, const sr_query *q)
{
	bool first = true;
	switch (q->kind) {
	case SR_Q_MATCH_ALL:
		put(b, "all");
		break;
	case SR_Q_MATCH_NONE:
		put(b, "none");
		break;
	case SR_Q_TERM:
	case SR_Q_PREFIX:
	case SR_Q_WILDCARD:
	case SR_Q_REGEXP:
		put(b, "%s(%s:%s%s)", sr_query_kind_name(q->kind), q->field, q->value,
		    q->case_insensitive ? ",ci" : "");
		break;
	case SR_Q_FUZZY:
		put(b, "fuzzy(%s:%s~%s)", q->field, q->value, q->fuzziness ? q->fuzziness : "-");
		break;
	case SR_Q_INTERVALS:
		put(b, "intervals(%s:", q->field);
		dump_iv(b, q->intervals);
		put(b, ")");
		break;
	case SR_Q_MATCH_BOOL_PREFIX:
	case SR_Q_MATCH:
		put(b, "%s(%s:%s%s%s%s)", q->kind == SR_Q_MATCH ? "match" : "bool_prefix", q->field,
		    q->value, q->op_and ? ",and" : "", q->fuzziness ? ",fuzz=" : "",
		    q->fuzziness ? q->fuzziness : "");
		break;
	case SR_Q_MATCH_PHRASE:
	case SR_Q_MATCH_PHRASE_PREFIX:
		put(b, "%s(%s:%s", q->kind == SR_Q_MATCH_PHRASE ? "phrase" : "phrase_prefix",
		    q->field, q->value);
		if (q->slop)
			put(b, "~%d", q->slop);
		put(b, ")");
		break;
	case SR_Q_EXISTS:
		put(b, "exists(%s)", q->field);
		break;
	case SR_Q_NESTED:
		put(b, "nested(%s:", q->field);
		dump(b, q->inner);
		put(b, ")");
		break;
	case SR_Q_RANGE:
		put(b, "range(%s:", q->field);
		if (q->gt)
			put(b, "%sgt=%s", first ? "" : ",", q->gt), first = false;
		if (q->gte)
			put(b, "%sgte=%s", first ? "" : ",", q->gte), first = false;
		if (q->lt)
			put(b, "%slt=%s", first ? "" : ",", q->lt), first = false;
		if (q->lte)
			put(b, "%slte=%s", first ? "" : ",", q->lte), first = false;
		put(b, ")");
		break;
	case SR_Q_TERMS:
	case SR_Q_IDS:
		put(b, "%s(", sr_query_kind_name(q->kind));
		if (q->field)
			put(b, "%s:", q->field);
		for (size_t i = 0; i < q->nvalues; i++)
			put(b, "%s%s", i ? "," : "", q->values[i]);
		put(b, ")");
		break;
	case SR_Q_MULTI_MATCH:
		put(b, "multi(%s:%s:", q->multi_type, q->value);
		for (size_t i = 0; i < q->nvalues; i++)
			put(b, "%s%s^%g", i ? "," : "", q->values[i], q->field_boosts[i]);
		put(b, ")");
		break;
	case SR_Q_BOOL:
		put(b, "bool(");
		dump_list(b, "+", q->must, q->nmust, &first);
		dump_list(b, "", q->should, q->nshould, &first);
		dump_list(b, "-", q->must_not, q->nmust_not, &first);
		dump_list(b, "#", q->filter, q->nfilter, &first);
		if (q->minimum_should_match)
			put(b, ",msm=%s", q->minimum_should_match);
		put(b, ")");
		break;
	case SR_Q_DIS_MAX:
		put(b, "dismax[%g](", q->tie_breaker);
		dump_list(b, "", q->queries, q->nqueries, &first);
		put(b, ")");
		break;
	case SR_Q_CONSTANT_SCORE:
		put(b, "cs(");
		dump(b, q->inner);
		put(b, ")");
		break;
	case SR_Q_BOOSTING:
		put(b, "boosting(");
		dump(b, q->inner);
		put(b, ",");
		dump(b, q->negative);
		put(b, ",%g)", q->negative_boost);
		break;
	case SR_Q_QUERY_STRING:
	case SR_Q_SIMPLE_QUERY_STRING:
		put(b, "%s(%s)", sr_query_kind_name(q->kind), q->value);
		break;
	case SR_Q_GEO_BOUNDING_BOX:
	case SR_Q_GEO_DISTANCE:
		put(b, "%s(%s:%g,%g,%g,%g)", sr_query_kind_name(q->kind), q->field, q->geo[0],
		    q->geo[1], q->geo[2], q->geo[3]);
		break;
	}
	if (q->boost != 1.0f)
		put(b, "^%g", q->boost);
}

static char dumped[8192];

static const char *
tree(const sr_query *q)
{
	sb b = {.len = 0};
	b.buf[0] = '\0';
	dump(&b, q);
	memcpy(dumped, b.buf, b.len + 1);
	return dumped;
}

/* Parses DSL text; returns the dump or "ERR <code>: <reason>". */
static char result[8192];

static const char *
dsl(const char *json)
{
	cJSON *j = cJSON_Parse(json);
	if (!j) {
		snprintf(result, sizeof(result), "BADJSON");
		return result;
	}
	sr_query *q = NULL;
	cm_error err = {0};
	cm_err rc = sr_query_from_json(j, &q, &err);
	cJSON_Delete(j);
	if (rc) {
		snprintf(result, sizeof(result), "ERR %s %s: %s", cm_err_name(rc),
		         cm_error_type(&err), err.reason);
		return result;
	}
	snprintf(result, sizeof(result), "%s", tree(q));
	sr_query_free(q);
	return result;
}

#define DSL(json, want)                                                                            \
	do {                                                                                       \
		const char *got_ = dsl(json);                                                      \
		CHECKF(strcmp(got_, want) == 0, "%s\n   got  %s\n   want %s", json, got_, want);   \
	} while (0)

static const char *
qs_full(const char *text, const char *df, bool and_op)
{
	sr_query *q = NULL;
	cm_error err = {0};
	cm_err rc = sr_query_string_parse(text, df, and_op, &q, &err);
	if (rc) {
		snprintf(result, sizeof(result), "ERR %s %s: %s", cm_err_name(rc),
		         cm_error_type(&err), err.reason);
		return result;
	}
	snprintf(result, sizeof(result), "%s", tree(q));
	sr_query_free(q);
	return result;
}

#define QS(text, want)                                                                             \
	do {                                                                                       \
		const char *got_ = qs_full(text, "f", false);                                      \
		CHECKF(strcmp(got_, want) == 0, "%s\n   got  %s\n   want %s", text, got_, want);   \
	} while (0)
#define QS_AND(text, want)                                                                         \
	do {                                                                                       \
		const char *got_ = qs_full(text, "f", true);                                       \
		CHECKF(strcmp(got_, want) == 0, "%s\n   got  %s\n   want %s", text, got_, want);   \
	} while (0)

/* Expands a query_string / simple_query_string DSL node. */
static const char *
expand(const char *json)
{
	cJSON *j = cJSON_Parse(json);
	sr_query *q = NULL, *t = NULL;
	cm_error err = {0};
	cm_err rc = sr_query_from_json(j, &q, &err);
	cJSON_Delete(j);
	if (!rc)
		rc = sr_query_string_expand(q, &t, &err);
	if (rc)
		snprintf(result, sizeof(result), "ERR %s %s: %s", cm_err_name(rc),
		         cm_error_type(&err), err.reason);
	else
		snprintf(result, sizeof(result), "%s", tree(t));
	sr_query_free(q);
	sr_query_free(t);
	return result;
}

#define EXPAND(json, want)                                                                         \
	do {                                                                                       \
		const char *got_ = expand(json);                                                   \
		CHECKF(strcmp(got_, want) == 0, "%s\n   got  %s\n   want %s", json, got_, want);   \
	} while (0)

static void
test_leaf_queries(void)
{
	DSL("{\"match_all\":{}}", "all");
	DSL("{\"match_all\":{\"boost\":1.5}}", "all^1.5");
	DSL("{\"match_none\":{}}", "none");
	DSL("{\"term\":{\"user\":\"kimchy\"}}", "term(user:kimchy)");
	DSL("{\"term\":{\"user\":{\"value\":\"Kimchy\",\"boost\":2,\"case_insensitive\":true}}}",
	    "term(user:Kimchy,ci)^2");
	DSL("{\"term\":{\"age\":42}}", "term(age:42)");
	DSL("{\"term\":{\"price\":1.5}}", "term(price:1.5)");
	DSL("{\"term\":{\"flag\":true}}", "term(flag:true)");
	DSL("{\"terms\":{\"tag\":[\"a\",\"b\",3],\"boost\":2}}", "terms(tag:a,b,3)^2");
	DSL("{\"ids\":{\"values\":[\"1\",\"4\",100]}}", "ids(1,4,100)");
	DSL("{\"exists\":{\"field\":\"user\"}}", "exists(user)");
	DSL("{\"prefix\":{\"user\":\"ki\"}}", "prefix(user:ki)");
	DSL("{\"prefix\":{\"user\":{\"value\":\"ki\",\"rewrite\":\"constant_score\"}}}",
	    "prefix(user:ki)");
	DSL("{\"wildcard\":{\"user\":{\"value\":\"ki*y\",\"boost\":1.0}}}", "wildcard(user:ki*y)");
	DSL("{\"wildcard\":{\"user\":{\"wildcard\":\"k?m*\"}}}", "wildcard(user:k?m*)");
	DSL("{\"regexp\":{\"user\":{\"value\":\"k.*y\",\"flags\":\"ALL\",\"max_determinized_"
	    "states\":"
	    "10000,\"case_insensitive\":true}}}",
	    "regexp(user:k.*y,ci)");
	DSL("{\"fuzzy\":{\"user\":\"ki\"}}", "fuzzy(user:ki~AUTO)");
	DSL("{\"fuzzy\":{\"user\":{\"value\":\"ki\",\"fuzziness\":2,\"prefix_length\":1,"
	    "\"max_expansions\":10,\"transpositions\":false}}}",
	    "fuzzy(user:ki~2)");
	DSL("{\"range\":{\"age\":{\"gte\":10,\"lte\":20,\"boost\":2}}}",
	    "range(age:gte=10,lte=20)^2");
	DSL("{\"range\":{\"age\":{\"gt\":10,\"lt\":20}}}", "range(age:gt=10,lt=20)");
	DSL("{\"range\":{\"age\":{\"from\":10,\"to\":20}}}", "range(age:gte=10,lte=20)");
	DSL("{\"range\":{\"age\":{\"from\":10,\"to\":20,\"include_lower\":false,"
	    "\"include_upper\":false}}}",
	    "range(age:gt=10,lt=20)");
	DSL("{\"range\":{\"age\":{\"from\":null,\"to\":5}}}", "range(age:lte=5)");
	DSL("{\"range\":{\"d\":{\"gte\":\"now-1d/d\",\"lt\":\"now/d\",\"format\":\"strict_date\","
	    "\"time_zone\":\"+01:00\"}}}",
	    "range(d:gte=now-1d/d,lt=now/d)");
	DSL("{\"range\":{\"age\":{\"gte\":1,\"gt\":2}}}", "range(age:gt=2)");

	/* the range's format and zone are kept */
	cJSON *j = cJSON_Parse("{\"range\":{\"d\":{\"gte\":\"2020\",\"format\":\"yyyy\","
	                       "\"time_zone\":\"Europe/Paris\",\"_name\":\"r1\"}}}");
	sr_query *q = NULL;
	cm_error err = {0};
	REQUIRE(sr_query_from_json(j, &q, &err) == CM_OK);
	CHECK(!strcmp(q->format, "yyyy") && !strcmp(q->time_zone, "Europe/Paris") &&
	      !strcmp(q->name, "r1"));
	sr_query *c = sr_query_clone(q);
	CHECK(!strcmp(tree(c), "range(d:gte=2020)") && c->format != q->format);
	sr_query_free(c);
	sr_query_free(q);
	cJSON_Delete(j);
}

static void
test_match_family(void)
{
	DSL("{\"match\":{\"msg\":\"quick fox\"}}", "match(msg:quick fox)");
	DSL("{\"match\":{\"msg\":{\"query\":\"quick fox\",\"operator\":\"AND\"}}}",
	    "match(msg:quick fox,and)");
	DSL("{\"match\":{\"msg\":{\"query\":\"quikc\",\"fuzziness\":\"AUTO\",\"prefix_length\":1,"
	    "\"max_expansions\":5,\"fuzzy_transpositions\":false}}}",
	    "match(msg:quikc,fuzz=AUTO)");
	DSL("{\"match\":{\"msg\":{\"query\":\"a\",\"fuzziness\":1}}}", "match(msg:a,fuzz=1)");
	DSL("{\"match\":{\"msg\":{\"query\":\"a\",\"fuzziness\":\"AUTO:3,6\"}}}",
	    "match(msg:a,fuzz=AUTO:3,6)");
	DSL("{\"match\":{\"msg\":{\"query\":\"a\",\"fuzziness\":\"auto:2,5\"}}}",
	    "match(msg:a,fuzz=AUTO:2,5)");
	DSL("{\"match\":{\"msg\":{\"query\":\"a\",\"fuzziness\":\"lots\"}}}",
	    "ERR CM_EPARSE parsing_exception: [match] failed to parse [fuzziness] value [lots]");
	DSL("{\"match\":{\"n\":5}}", "match(n:5)");

	cJSON *j = cJSON_Parse("{\"match\":{\"msg\":{\"query\":\"to be\",\"minimum_should_match\":"
	                       "\"75%\",\"analyzer\":\"english\",\"zero_terms_query\":\"all\","
	                       "\"lenient\":true}}}");
	sr_query *q = NULL;
	cm_error err = {0};
	REQUIRE(sr_query_from_json(j, &q, &err) == CM_OK);
	CHECK(!strcmp(q->minimum_should_match, "75%"));
	CHECK(!strcmp(q->analyzer, "english"));
	CHECK(q->zero_terms_all && q->lenient);
	sr_query_free(q);
	cJSON_Delete(j);

	j = cJSON_Parse("{\"match\":{\"msg\":{\"query\":\"x\",\"minimum_should_match\":2}}}");
	REQUIRE(sr_query_from_json(j, &q, &err) == CM_OK);
	CHECK(!strcmp(q->minimum_should_match, "2"));
	sr_query_free(q);
	cJSON_Delete(j);

	DSL("{\"match_phrase\":{\"msg\":\"quick fox\"}}", "phrase(msg:quick fox)");
	DSL("{\"match_phrase\":{\"msg\":{\"query\":\"quick fox\",\"slop\":2,\"analyzer\":"
	    "\"standard\"}}}",
	    "phrase(msg:quick fox~2)");
	DSL("{\"match_phrase_prefix\":{\"msg\":{\"query\":\"quick br\",\"max_expansions\":10}}}",
	    "phrase_prefix(msg:quick br)");
	DSL("{\"match_phrase\":{\"msg\":{\"query\":\"a\",\"operator\":\"and\"}}}",
	    "ERR CM_EPARSE parsing_exception: [match_phrase] query does not support [operator]");

	DSL("{\"match_bool_prefix\":{\"msg\":{\"query\":\"quick br\",\"operator\":\"and\"}}}",
	    "bool_prefix(msg:quick br,and)");
	DSL("{\"multi_match\":{\"query\":\"a b\",\"type\":\"bool_prefix\",\"fields\":[\"t\"]}}",
	    "multi(bool_prefix:a b:t^1)");
	DSL("{\"multi_match\":{\"query\":\"a\",\"type\":\"bool_prefix\",\"slop\":1}}",
	    "ERR CM_EPARSE parsing_exception: [slop] not allowed for type [bool_prefix]");
	DSL("{\"multi_match\":{\"query\":\"a\",\"type\":\"bool_prefix\",\"cutoff_frequency\":1}}",
	    "ERR CM_EPARSE parsing_exception: [cutoff_frequency] not allowed for type "
	    "[bool_prefix]");
	DSL("{\"intervals\":{\"t\":{\"match\":{\"query\":\"a b\",\"ordered\":true,"
	    "\"max_gaps\":0}}}}",
	    "intervals(t:match(a b,ordered,gaps=0))");
	DSL("{\"intervals\":{\"t\":{\"all_of\":{\"intervals\":[{\"prefix\":{\"prefix\":\"o\"}},"
	    "{\"fuzzy\":{\"term\":\"x\",\"fuzziness\":1}}],\"filter\":{\"not_containing\":{"
	    "\"wildcard\":{\"pattern\":\"a*\",\"use_field\":\"u\"}}}},\"boost\":2}}}",
	    "intervals(t:all_of(prefix(o),fuzzy(x,fuzz=1),not_containing:wildcard(a*,use=u)))^2");
	DSL("{\"intervals\":{\"t\":{\"near\":{}}}}",
	    "ERR CM_EPARSE parsing_exception: Unknown interval type [near], expecting one of "
	    "[match, any_of, all_of, prefix, wildcard, fuzzy]");
	DSL("{\"intervals\":{\"t\":{\"match\":{\"query\":\"a\",\"filter\":{\"script\":{}}}}}}",
	    "ERR CM_EPARSE parsing_exception: [intervals] filter [script] is not supported");
	DSL("{\"intervals\":{\"t\":{\"any_of\":{\"intervals\":[]}}}}",
	    "ERR CM_EINVAL illegal_argument_exception: [any_of] requires at least one interval");
	DSL("{\"multi_match\":{\"query\":\"brown fox\",\"fields\":[\"subject^3\",\"message\"]}}",
	    "multi(best_fields:brown fox:subject^3,message^1)");
	DSL("{\"multi_match\":{\"query\":\"x\",\"fields\":\"title\",\"type\":\"most_fields\"}}",
	    "multi(most_fields:x:title^1)");
	DSL("{\"multi_match\":{\"query\":\"x\",\"fields\":[\"a\",\"b\"],\"type\":\"cross_fields\","
	    "\"operator\":\"and\"}}",
	    "multi(most_fields:x:a^1,b^1)");
	DSL("{\"multi_match\":{\"query\":\"x\",\"type\":\"phrase\",\"slop\":1}}",
	    "multi(phrase:x:*^1)");
	DSL("{\"multi_match\":{\"query\":\"x\",\"type\":\"phrase_prefix\",\"fields\":[\"t*\"]}}",
	    "multi(phrase_prefix:x:t*^1)");
	DSL("{\"multi_match\":{\"query\":\"x\",\"type\":\"nope\"}}",
	    "ERR CM_EPARSE parsing_exception: failed to parse [multi_match] query type [nope]. "
	    "unknown "
	    "type.");
	DSL("{\"multi_match\":{\"fields\":[\"a\"]}}",
	    "ERR CM_EINVAL illegal_argument_exception: No text specified for multi_match query");
	DSL("{\"multi_match\":{\"query\":\"x\",\"type\":\"phrase\",\"fuzziness\":1}}",
	    "ERR CM_EPARSE parsing_exception: Fuzziness not allowed for type [phrase]");
	j = cJSON_Parse(
	    "{\"multi_match\":{\"query\":\"x\",\"fields\":[\"a\",\"b\"],\"tie_breaker\":"
	    "0.3,\"operator\":\"and\",\"minimum_should_match\":\"2<75%\"}}");
	REQUIRE(sr_query_from_json(j, &q, &err) == CM_OK);
	CHECK(fabsf(q->tie_breaker - 0.3f) < 1e-6 && q->op_and);
	CHECK(!strcmp(q->minimum_should_match, "2<75%"));
	sr_query_free(q);
	cJSON_Delete(j);
}

static void
test_compound(void)
{
	DSL("{\"bool\":{\"must\":{\"term\":{\"a\":\"1\"}},\"filter\":[{\"term\":{\"b\":\"2\"}}],"
	    "\"must_not\":[{\"range\":{\"c\":{\"gte\":5}}}],\"should\":[{\"term\":{\"d\":\"x\"}},"
	    "{\"term\":{\"d\":\"y\"}}],\"minimum_should_match\":1,\"boost\":2}}",
	    "bool(+term(a:1),term(d:x),term(d:y),-range(c:gte=5),#term(b:2),msm=1)^2");
	DSL("{\"bool\":{}}", "bool()");
	DSL("{\"bool\":{\"must\":[{}, {\"match_all\":{}}]}}",
	    "ERR CM_EPARSE parsing_exception: query malformed, empty clause found");
	DSL("{\"bool\":{\"must\":[{\"bool\":{\"should\":[{\"term\":{\"a\":\"b\"}}]}}]}}",
	    "bool(+bool(term(a:b)))");
	DSL("{\"constant_score\":{\"filter\":{\"term\":{\"u\":\"k\"}},\"boost\":1.2}}",
	    "cs(term(u:k))^1.2");
	DSL("{\"constant_score\":{\"boost\":1.2}}",
	    "ERR CM_EPARSE parsing_exception: [constant_score] requires a 'filter' element");
	DSL("{\"dis_max\":{\"queries\":[{\"term\":{\"t\":\"a\"}},{\"match\":{\"b\":\"c\"}}],"
	    "\"tie_breaker\":0.7}}",
	    "dismax[0.7](term(t:a),match(b:c))");
	DSL("{\"dis_max\":{\"queries\":[]}}",
	    "ERR CM_EPARSE parsing_exception: [dis_max] requires 'queries' field with at least one "
	    "clause");
	DSL("{\"boosting\":{\"positive\":{\"term\":{\"t\":\"apple\"}},\"negative\":{\"term\":{"
	    "\"t\":"
	    "\"pie\"}},\"negative_boost\":0.5}}",
	    "boosting(term(t:apple),term(t:pie),0.5)");
	DSL("{\"boosting\":{\"positive\":{\"term\":{\"t\":\"apple\"}},\"negative\":{\"term\":{"
	    "\"t\":"
	    "\"pie\"}}}}",
	    "ERR CM_EPARSE parsing_exception: [boosting] query requires 'negative_boost' to be set "
	    "to "
	    "be a positive value'");
	DSL("{\"boosting\":{\"negative\":{\"term\":{\"t\":\"pie\"}},\"negative_boost\":0.5}}",
	    "ERR CM_EPARSE parsing_exception: [boosting] query requires 'positive' query");
}

static void
test_errors(void)
{
	DSL("{\"foo\":{}}", "ERR CM_EPARSE parsing_exception: unknown query [foo]");
	DSL("{\"bool\":{\"must\":{\"nope\":{\"a\":1}}}}",
	    "ERR CM_EPARSE parsing_exception: unknown query [nope]");
	DSL("{\"nested\":{\"path\":\"x\"}}",
	    "ERR CM_EPARSE parsing_exception: [nested] requires 'query' field");
	DSL("{\"nested\":{\"query\":{\"match_all\":{}}}}",
	    "ERR CM_EPARSE parsing_exception: [nested] requires 'path' field");
	DSL("{\"nested\":{\"path\":\"c\",\"query\":{\"term\":{\"c.a\":\"x\"}}}}",
	    "nested(c:term(c.a:x))");
	DSL("{\"has_child\":{}}",
	    "ERR CM_EPARSE parsing_exception: [has_child] query is not supported");
	DSL("{\"term\":{\"a\":\"x\",\"b\":\"y\"}}", "ERR CM_EPARSE parsing_exception: [term] query "
	                                            "doesn't support multiple fields, found [a] "
	                                            "and [b]");
	DSL("{\"match\":{\"a\":\"x\",\"b\":{\"query\":\"y\"}}}",
	    "ERR CM_EPARSE parsing_exception: [match] query doesn't support multiple fields, found "
	    "[a] "
	    "and [b]");
	DSL("{\"range\":{\"a\":{\"gte\":1},\"b\":{\"lte\":2}}}",
	    "ERR CM_EPARSE parsing_exception: [range] query doesn't support multiple fields, found "
	    "[a] "
	    "and [b]");
	DSL("{\"terms\":{\"a\":[\"x\"],\"b\":[\"y\"]}}",
	    "ERR CM_EPARSE parsing_exception: [terms] query does not support multiple fields, "
	    "found "
	    "[a] and [b]");
	DSL("{\"term\":{\"a\":{\"value\":\"x\",\"bogus\":1}}}",
	    "ERR CM_EPARSE parsing_exception: [term] query does not support [bogus]");
	DSL("{\"term\":{\"a\":[1,2]}}", "ERR CM_EPARSE parsing_exception: [term] query does not "
	                                "support array of values for [a]");
	DSL("{\"term\":{\"a\":{\"value\":{\"x\":1}}}}",
	    "ERR CM_EPARSE parsing_exception: [term] query does not support [value] of type "
	    "START_OBJECT");
	DSL("{\"match\":{\"a\":{\"query\":\"x\",\"operator\":\"xor\"}}}",
	    "ERR CM_EINVAL illegal_argument_exception: No enum constant match.Operator.xor");
	DSL("{\"match\":{\"a\":{\"boost\":\"high\",\"query\":\"x\"}}}",
	    "ERR CM_EPARSE parsing_exception: [match] failed to parse [boost]: expected a number, "
	    "found "
	    "VALUE_STRING");
	DSL("{\"bool\":{\"must\":[{\"term\":{\"a\":\"x\"}}],\"foo\":1}}",
	    "ERR CM_EPARSE parsing_exception: [bool] query does not support [foo]");
	DSL("{\"bool\":{\"must\":\"x\"}}",
	    "ERR CM_EPARSE parsing_exception: [bool] query does not support [must]");
	DSL("{\"term\":{\"a\":\"x\"},\"match\":{\"b\":\"y\"}}",
	    "ERR CM_EPARSE parsing_exception: [term] malformed query, expected [END_OBJECT] but "
	    "found "
	    "[FIELD_NAME]");
	DSL("{}", "ERR CM_EPARSE parsing_exception: query malformed, empty clause found");
	DSL("{\"terms\":{\"a\":{\"index\":\"i\",\"id\":\"1\",\"path\":\"p\"}}}",
	    "ERR CM_EINVAL illegal_argument_exception: [terms] query lookup (terms from another "
	    "document) is not supported");
	DSL("{\"exists\":{}}",
	    "ERR CM_EPARSE parsing_exception: [exists] must be provided with a [field]");
	DSL("{\"match\":{\"a\":{\"operator\":\"and\"}}}",
	    "ERR CM_EINVAL illegal_argument_exception: [match] requires query value");
	DSL("{\"term\":{}}",
	    "ERR CM_EPARSE parsing_exception: [term] query malformed, no field specified");
	DSL("[1]",
	    "ERR CM_EPARSE parsing_exception: [_na] query malformed, must start with start_object");

	/* 1025 bool clauses → too_many_clauses */
	cJSON *root = cJSON_CreateObject();
	cJSON *b = cJSON_AddObjectToObject(root, "bool");
	cJSON *should = cJSON_AddArrayToObject(b, "should");
	for (int i = 0; i < 1025; i++) {
		cJSON *t = cJSON_CreateObject();
		cJSON *term = cJSON_AddObjectToObject(t, "term");
		char v[16];
		snprintf(v, sizeof(v), "v%d", i);
		cJSON_AddStringToObject(term, "f", v);
		cJSON_AddItemToArray(should, t);
	}
	sr_query *q = NULL;
	cm_error err = {0};
	CHECK(sr_query_from_json(root, &q, &err) == CM_ELIMIT);
	CHECK(!strcmp(cm_error_type(&err), "too_many_clauses"));
	CHECK(!strcmp(err.reason, "maxClauseCount is set to 1024"));
	CHECK(q == NULL);
	/* 1024 is fine */
	cJSON_DeleteItemFromArray(should, 0);
	memset(&err, 0, sizeof(err));
	CHECK(sr_query_from_json(root, &q, &err) == CM_OK && q && q->nshould == 1024);
	sr_query_free(q);
	cJSON_Delete(root);

	/* nesting depth: 100 levels parse, 101 do not */
	for (int depth = 100; depth <= 101; depth++) {
		char *s = malloc((size_t)depth * 40 + 64);
		size_t n = 0;
		for (int i = 0; i < depth - 1; i++)
			n += (size_t)sprintf(s + n, "{\"bool\":{\"must\":");
		n += (size_t)sprintf(s + n, "{\"match_all\":{}}");
		for (int i = 0; i < depth - 1; i++)
			n += (size_t)sprintf(s + n, "}}");
		cJSON *j = cJSON_Parse(s);
		REQUIRE(j);
		memset(&err, 0, sizeof(err));
		cm_err rc = sr_query_from_json(j, &q, &err);
		CHECKF(depth == 100 ? rc == CM_OK : rc == CM_EPARSE, "depth %d rc %d", depth, rc);
		sr_query_free(q);
		cJSON_Delete(j);
		free(s);
	}
}

static void
test_query_string(void)
{
	QS("foo", "match(f:foo)");
	QS("foo bar", "bool(match(f:foo),match(f:bar))");
	QS_AND("foo bar", "bool(+match(f:foo,and),+match(f:bar,and))");
	QS("foo AND bar", "bool(+match(f:foo),+match(f:bar))");
	QS("foo && bar", "bool(+match(f:foo),+match(f:bar))");
	QS("foo OR bar", "bool(match(f:foo),match(f:bar))");
	QS("foo || bar", "bool(match(f:foo),match(f:bar))");
	QS("a AND b OR c", "bool(+match(f:a),+match(f:b),match(f:c))");
	QS_AND("a OR b", "bool(match(f:a,and),match(f:b,and))");
	QS_AND("a b OR c", "bool(+match(f:a,and),match(f:b,and),match(f:c,and))");
	QS("+a -b c", "bool(+match(f:a),match(f:c),-match(f:b))");
	QS("NOT a", "bool(-match(f:a))");
	QS("!a", "bool(-match(f:a))");
	QS("a NOT b", "bool(match(f:a),-match(f:b))");
	QS("a AND NOT b", "bool(+match(f:a),-match(f:b))");
	QS("title:hello", "match(title:hello)");
	QS("title:(quick brown)", "bool(match(title:quick),match(title:brown))");
	QS("title:\"quick brown\"", "phrase(title:quick brown)");
	QS("\"quick brown\"~3", "phrase(f:quick brown~3)");
	QS("(a OR b) AND c", "bool(+bool(match(f:a),match(f:b)),+match(f:c))");
	QS("(a b)^2", "bool(match(f:a),match(f:b))^2");
	QS("a^3 b", "bool(match(f:a)^3,match(f:b))");
	QS("qu?ck", "wildcard(f:qu?ck)");
	QS("bro*", "prefix(f:bro)");
	QS("*ing", "wildcard(f:*ing)");
	QS("b*o*", "wildcard(f:b*o*)");
	QS("quikc~", "fuzzy(f:quikc~AUTO)");
	QS("quikc~1", "fuzzy(f:quikc~1)");
	QS("quikc~5", "fuzzy(f:quikc~2)");
	QS("quikc~0.5", "fuzzy(f:quikc~0)");
	QS("age:[1 TO 5]", "range(age:gte=1,lte=5)");
	QS("age:{1 TO 5}", "range(age:gt=1,lt=5)");
	QS("age:[1 TO 5}", "range(age:gte=1,lt=5)");
	QS("age:[10 TO *]", "range(age:gte=10)");
	QS("date:{* TO 2012-01-01}", "range(date:lt=2012-01-01)");
	QS("name:[\"a b\" TO \"c\"]", "range(name:gte=a b,lte=c)");
	QS("age:>10", "range(age:gt=10)");
	QS("age:>=10", "range(age:gte=10)");
	QS("age:<10", "range(age:lt=10)");
	QS("age:<=10", "range(age:lte=10)");
	QS("_exists_:title", "exists(title)");
	QS("title:*", "exists(title)");
	QS("*:*", "all");
	QS("/jo.*n/", "regexp(f:jo.*n)");
	QS("name:/joh?n(ath[oa]n)/", "regexp(name:joh?n(ath[oa]n))");
	QS("a\\:b", "match(f:a:b)");
	QS("1\\+1", "match(f:1+1)");
	QS("foo\\*", "match(f:foo*)");
	QS("fo\\*o*", "prefix(f:fo*o)");
	QS("f\\?o?", "wildcard(f:f\\?o?)");
	QS("wi-fi", "match(f:wi-fi)");
	QS("a && b || c", "bool(+match(f:a),+match(f:b),match(f:c))");
	QS("ANDROID", "match(f:ANDROID)");
	QS("\"a \\\"quoted\\\" word\"", "phrase(f:a \"quoted\" word)");
	QS("city.\\*:paris", "match(city.*:paris)");
	QS("status:active AND (group:a OR group:b) -deleted:true",
	   "bool(+match(status:active),+bool(match(group:a),match(group:b)),-match(deleted:true))");
	QS("", "none");
	QS("   ", "none");
	QS("\\u0041bc", "match(f:Abc)");
	QS("foo^2~1", "fuzzy(f:foo~1)^2");
	QS("title:foo bar", "bool(match(title:foo),match(f:bar))");
	QS("a - b", "bool(match(f:a),match(f:b))");
	QS("a -b", "bool(match(f:a),-match(f:b))");
	QS("-a -b", "bool(-match(f:a),-match(f:b))");
	QS("a:(b OR c) AND d:e", "bool(+bool(match(a:b),match(a:c)),+match(d:e))");
	QS("a OR b AND c", "bool(+match(f:b),+match(f:c),match(f:a))");
	QS_AND("a AND b OR c", "bool(+match(f:a,and),match(f:b,and),match(f:c,and))");
	QS("x:y^0.5", "match(x:y)^0.5");

	/* syntax errors, like ES's query_shard_exception */
	const char *bad[] = {
	    "foo AND", "(foo",  "foo)", "\"foo",     "title:", "[1 TO", "foo^", "a:b:c",
	    "/abc",    "foo\\", "AND",  "quikc~1.5", "a OR",   "()",    "a:(b"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *got = qs_full(bad[i], "f", false);
		char want[256];
		snprintf(want, sizeof(want),
		         "ERR CM_EPARSE query_shard_exception: Failed to parse query [%s]", bad[i]);
		CHECKF(!strcmp(got, want), "%s → %s", bad[i], got);
	}

	/* default field "*": every field; "*" alone matches everything */
	const char *got = qs_full("foo", NULL, false);
	CHECKF(!strcmp(got, "match(*:foo)"), "%s", got);
	got = qs_full("*", NULL, false);
	CHECKF(!strcmp(got, "all"), "%s", got);
	got = qs_full("*", "title", false);
	CHECKF(!strcmp(got, "exists(title)"), "%s", got);

	/* wildcard / prefix nodes ask for the field's normalization */
	sr_query *q = NULL;
	cm_error err = {0};
	REQUIRE(sr_query_string_parse("Qu*", "f", false, &q, &err) == CM_OK);
	CHECK(q->kind == SR_Q_PREFIX && q->analyze_multiterm);
	sr_query_free(q);

	/* deep parentheses are bounded */
	char deep[512];
	memset(deep, '(', 150);
	strcpy(deep + 150, "a");
	memset(deep + 151, ')', 150);
	deep[301] = '\0';
	memset(&err, 0, sizeof(err));
	CHECK(sr_query_string_parse(deep, "f", false, &q, &err) == CM_EPARSE);
}

static void
test_query_string_dsl(void)
{
	EXPAND("{\"query_string\":{\"query\":\"this AND that\",\"default_field\":\"content\"}}",
	       "bool(+match(content:this),+match(content:that))");
	EXPAND("{\"query_string\":{\"query\":\"a b\",\"default_operator\":\"AND\"}}",
	       "bool(+match(*:a,and),+match(*:b,and))");
	EXPAND("{\"query_string\":{\"query\":\"x\",\"fields\":[\"title^2\",\"body\"]}}",
	       "dismax[0](match(title:x)^2,match(body:x))");
	EXPAND("{\"query_string\":{\"query\":\"x\",\"fields\":[\"a\",\"b\"],\"type\":"
	       "\"most_fields\"}}",
	       "dismax[1](match(a:x),match(b:x))");
	EXPAND("{\"query_string\":{\"query\":\"x y\",\"default_field\":\"t\",\"boost\":2,"
	       "\"minimum_should_match\":\"2\"}}",
	       "bool(match(t:x),match(t:y),msm=2)^2");
	EXPAND(
	    "{\"query_string\":{\"query\":\"\\\"a b\\\"\",\"default_field\":\"t\",\"phrase_slop\":"
	    "2}}",
	    "phrase(t:a b~2)");
	EXPAND("{\"query_string\":{\"query\":\"x~\",\"default_field\":\"t\",\"fuzziness\":1}}",
	       "fuzzy(t:x~1)");
	DSL("{\"query_string\":{\"query\":\"a AND\"}}",
	    "ERR CM_EPARSE query_shard_exception: Failed to parse query [a AND]");
	DSL("{\"query_string\":{\"default_field\":\"a\"}}",
	    "ERR CM_EPARSE parsing_exception: [query_string] must be provided with a [query]");
	DSL("{\"query_string\":{\"query\":\"x\",\"default_field\":\"a\",\"fields\":[\"b\"]}}",
	    "ERR CM_EPARSE parsing_exception: [query_string] cannot use [fields] parameter in "
	    "conjunction with [default_field]");
	DSL("{\"query_string\":{\"query\":\"x\",\"analyze_wildcard\":true,\"allow_leading_"
	    "wildcard\":"
	    "false}}",
	    "query_string(x)");

	/* simple_query_string: Lucene SimpleQueryParser */
	EXPAND("{\"simple_query_string\":{\"query\":\"a b\",\"fields\":[\"t\"]}}",
	       "bool(match(t:a),match(t:b))");
	EXPAND(
	    "{\"simple_query_string\":{\"query\":\"a b\",\"fields\":[\"t\"],\"default_operator\":"
	    "\"and\"}}",
	    "bool(+match(t:a,and),+match(t:b,and))");
	EXPAND("{\"simple_query_string\":{\"query\":\"a + b | c\",\"fields\":[\"t\"]}}",
	       "bool(bool(+match(t:a),+match(t:b)),match(t:c))");
	EXPAND("{\"simple_query_string\":{\"query\":\"a -b\",\"fields\":[\"t\"]}}",
	       "bool(match(t:a),bool(all,-match(t:b)))");
	EXPAND("{\"simple_query_string\":{\"query\":\"\\\"fried eggs\\\"~2 eggplant*\",\"fields\":"
	       "[\"t\"]}}",
	       "bool(phrase(t:fried eggs~2),prefix(t:eggplant))");
	EXPAND("{\"simple_query_string\":{\"query\":\"quikc~1 (a | b) + c\",\"fields\":[\"t\"]}}",
	       "bool(+bool(fuzzy(t:quikc~1),bool(match(t:a),match(t:b))),+match(t:c))");
	EXPAND("{\"simple_query_string\":{\"query\":\"x\",\"fields\":[\"a^2\",\"b\"]}}",
	       "dismax[1](match(a:x)^2,match(b:x))");
	/* never throws: unbalanced syntax is taken as text */
	EXPAND("{\"simple_query_string\":{\"query\":\"(a \\\"b\",\"fields\":[\"t\"]}}",
	       "bool(match(t:a),match(t:b))");
	EXPAND("{\"simple_query_string\":{\"query\":\"\",\"fields\":[\"t\"]}}", "none");
	EXPAND(
	    "{\"simple_query_string\":{\"query\":\"a|b\",\"fields\":[\"t\"],\"flags\":\"NONE\"}}",
	    "match(t:a|b)");
	EXPAND("{\"simple_query_string\":{\"query\":\"a -b\",\"fields\":[\"t\"],\"flags\":"
	       "\"OR|AND|PREFIX|WHITESPACE\"}}",
	       "bool(match(t:a),match(t:-b))");
	EXPAND(
	    "{\"simple_query_string\":{\"query\":\"a\",\"flags\":\"BOGUS\"}}",
	    "ERR CM_EINVAL illegal_argument_exception: Unknown simple_query_string flag [BOGUS]");
	EXPAND("{\"simple_query_string\":{\"query\":\"a\\\\+b\",\"fields\":[\"t\"]}}",
	       "match(t:a+b)");
	/* a non-query-string node is copied */
	EXPAND("{\"term\":{\"a\":\"b\"}}", "term(a:b)");
}

/* ---- request ---- */

static cm_err
req_parse(const char *json, sr_request *r, cm_error *err)
{
	cJSON *j = cJSON_Parse(json);
	REQUIRE(j != NULL);
	sr_request_init(r);
	memset(err, 0, sizeof(*err));
	cm_err rc = sr_request_from_json(j, r, err);
	cJSON_Delete(j);
	return rc;
}

#define REQ_ERR(json, code, why)                                                                   \
	do {                                                                                       \
		sr_request r_;                                                                     \
		cm_error e_;                                                                       \
		cm_err rc_ = req_parse(json, &r_, &e_);                                            \
		CHECKF(rc_ == (code) && !strcmp(e_.reason, why), "%s → %s: %s", json,              \
		       cm_err_name(rc_), e_.reason);                                               \
		sr_request_free(&r_);                                                              \
	} while (0)

static void
test_request(void)
{
	sr_request r;
	cm_error err;

	sr_request_init(&r);
	CHECK(sr_request_from_json(NULL, &r, &err) == CM_OK);
	CHECK(r.size == 10 && r.from == 0 && r.track_total_hits == 10000 && r.fetch_source &&
	      r.query == NULL && r.nsort == 0);
	sr_request_free(&r);

	uint64_t before = cm_now_ns();
	REQUIRE(
	    req_parse("{\"query\":{\"term\":{\"a\":\"b\"}},\"from\":5,\"size\":\"20\",\"sort\":["
	              "\"_score\",{\"date\":\"desc\"},{\"name\":{\"order\":\"asc\",\"missing\":"
	              "\"_first\",\"mode\":\"max\",\"unmapped_type\":\"keyword\"}},\"_doc\","
	              "\"plain\",{\"_score\":{\"order\":\"asc\"}}],"
	              "\"track_total_hits\":true,\"timeout\":\"5s\",\"terminate_after\":100,"
	              "\"_source\":{\"includes\":[\"a.*\",\"b\"],\"excludes\":\"a.secret\"},"
	              "\"version\":true,\"seq_no_primary_term\":true,\"track_scores\":true}",
	              &r, &err) == CM_OK);
	CHECK(r.query && r.query->kind == SR_Q_TERM);
	CHECK(r.from == 5 && r.size == 20);
	REQUIRE(r.nsort == 6);
	CHECK(r.sort[0].kind == SR_SORT_SCORE && r.sort[0].desc);
	CHECK(r.sort[1].kind == SR_SORT_FIELD && !strcmp(r.sort[1].field, "date") &&
	      r.sort[1].desc && !r.sort[1].missing_first);
	CHECK(!strcmp(r.sort[2].field, "name") && !r.sort[2].desc && r.sort[2].missing_first &&
	      r.sort[2].mode == SR_SORT_MODE_MAX && !strcmp(r.sort[2].unmapped_type, "keyword"));
	CHECK(r.sort[3].kind == SR_SORT_DOC && !r.sort[3].desc);
	CHECK(r.sort[4].kind == SR_SORT_FIELD && !r.sort[4].desc);
	CHECK(r.sort[5].kind == SR_SORT_SCORE && !r.sort[5].desc);
	CHECK(r.track_total_hits == SR_TRACK_ALL);
	CHECK(r.timeout_ns == 5000000000ull && r.deadline_ns >= before + 5000000000ull &&
	      r.deadline_ns <= cm_now_ns() + 5000000000ull);
	CHECK(r.terminate_after == 100);
	CHECK(r.fetch_source && r.nincludes == 2 && r.nexcludes == 1 &&
	      !strcmp(r.source_includes[0], "a.*") && !strcmp(r.source_excludes[0], "a.secret"));
	CHECK(r.version && r.seq_no_primary_term && r.track_scores);
	sr_request_free(&r);

	REQUIRE(req_parse("{\"sort\":{\"n\":{\"order\":\"desc\"}},\"search_after\":[5],"
	                  "\"_source\":false,\"track_total_hits\":100,\"timeout\":\"1ms\"}",
	                  &r, &err) == CM_OK);
	CHECK(r.nsort == 1 && r.sort[0].desc && r.nsearch_after == 1 &&
	      r.search_after[0].type == SR_SV_LONG && r.search_after[0].l == 5);
	CHECK(!r.fetch_source && r.track_total_hits == 100 && r.timeout_ns == 1000000);
	sr_request_free(&r);

	REQUIRE(req_parse("{\"sort\":[\"a\",\"b\",\"c\"],\"search_after\":[1.5,\"x\",null],"
	                  "\"_source\":\"obj.*\",\"track_total_hits\":false}",
	                  &r, &err) == CM_OK);
	CHECK(r.search_after[0].type == SR_SV_DOUBLE && r.search_after[0].d == 1.5);
	CHECK(r.search_after[1].type == SR_SV_STRING && !strcmp(r.search_after[1].s, "x"));
	CHECK(r.search_after[2].type == SR_SV_NULL);
	CHECK(r.nincludes == 1 && !strcmp(r.source_includes[0], "obj.*"));
	CHECK(r.track_total_hits == 0);
	sr_request_free(&r);

	REQUIRE(req_parse("{\"_source\":[\"a\",\"b\"],\"timeout\":\"1m\",\"sort\":\"x\","
	                  "\"aggs\":{\"m\":{\"max\":{\"field\":\"n\"}}}}",
	                  &r, &err) == CM_OK);
	CHECK(r.nincludes == 2 && r.timeout_ns == 60000000000ull && r.nsort == 1 && r.aggs);
	sr_request_free(&r);

	REQ_ERR("{\"foo\":{}}", CM_EPARSE, "Unknown key for a START_OBJECT in [foo].");
	REQ_ERR("{\"foo\":1}", CM_EPARSE, "Unknown key for a VALUE_NUMBER in [foo].");
	REQ_ERR("{\"foo\":[1]}", CM_EPARSE, "Unknown key for a START_ARRAY in [foo].");
	REQ_ERR("{\"highlight\":{}}", CM_EPARSE, "[highlight] requires [fields]");
	REQ_ERR("{\"highlight\":{\"fields\":{\"a\":{}},\"foo\":1}}", CM_EPARSE,
	        "[highlight] unknown field [foo]");
	REQ_ERR("{\"highlight\":{\"fields\":{\"a\":{\"type\":\"x\"}}}}", CM_EINVAL,
	        "unknown highlighter type [x] for the field [a]");
	REQ_ERR(
	    "{\"suggest\":{\"s\":{\"text\":\"x\",\"completion\":{\"field\":\"f\",\"fuzzy\":1}}}}",
	    CM_EINVAL, "[completion] suggester option [fuzzy] is not supported");
	REQ_ERR("{\"suggest\":{\"s\":{\"text\":\"x\",\"term\":{\"field\":\"f\",\"bogus\":1}}}}",
	        CM_EPARSE, "suggester[term] doesn't support field [bogus]");
	REQ_ERR("{\"post_filter\":{}}", CM_EPARSE, "query malformed, empty clause found");
	REQ_ERR("{\"rescore\":{\"query\":{\"rescore_query\":{\"match_all\":{}},"
	        "\"score_mode\":\"sum\"}}}",
	        CM_EINVAL, "illegal score_mode [sum]");
	REQ_ERR("{\"rescore\":{\"query\":{}}}", CM_EINVAL, "rescore_query cannot be null");
	REQ_ERR("{\"indices_boost\":[{\"a\":1,\"b\":2}]}", CM_EPARSE,
	        "Expected [END_OBJECT] in [indices_boost] but found [FIELD_NAME]");
	REQ_ERR("{\"collapse\":{\"field\":\"g\"},\"rescore\":{\"query\":{\"rescore_query\":"
	        "{\"match_all\":{}}}}}",
	        CM_EINVAL, "cannot use `collapse` in conjunction with `rescore`");
	REQ_ERR("{\"min_score\":true}", CM_EPARSE,
	        "[search_source] failed to parse field [min_score]: expected a number, found "
	        "VALUE_BOOLEAN");
	REQ_ERR("{\"size\":-1}", CM_EINVAL, "[size] parameter cannot be negative, found [-1]");
	REQ_ERR("{\"from\":-2}", CM_EINVAL, "[from] parameter cannot be negative but was [-2]");
	REQ_ERR(
	    "{\"timeout\":\"10\"}", CM_EPARSE,
	    "failed to parse setting [timeout] with value [10] as a time value: unit is missing "
	    "or unrecognized");
	REQ_ERR("{\"sort\":[\"a\"],\"search_after\":[1,2]}", CM_EINVAL,
	        "search_after has 2 value(s) but sort has 1.");
	REQ_ERR("{\"sort\":[\"a\"],\"search_after\":[1],\"from\":3}", CM_EVALIDATE,
	        "Validation Failed: 1: `from` parameter must be set to 0 when `search_after` is "
	        "used.;");
	REQ_ERR("{\"sort\":[{\"a\":\"sideways\"}]}", CM_EINVAL, "Unknown SortOrder [sideways]");
	REQ_ERR("{\"sort\":[{\"a\":{\"order\":\"asc\",\"bogus\":1}}]}", CM_EPARSE,
	        "[field_sort] unknown field [bogus]");
	REQ_ERR(
	    "{\"track_total_hits\":-5}", CM_EVALIDATE,
	    "Validation Failed: 1: [track_total_hits] parameter must be positive or equals to -1, "
	    "got -5;");
	REQ_ERR("{\"query\":{\"foo\":{}}}", CM_EPARSE, "unknown query [foo]");
	REQ_ERR("{\"_source\":{\"includes\":\"a\",\"what\":1}}", CM_EPARSE,
	        "Unknown key for a VALUE_NUMBER in [what].");

	/* URL parameter forms */
	sr_request_init(&r);
	memset(&err, 0, sizeof(err));
	CHECK(sr_request_sort_param(&r, "age:desc,name,_score", &err) == CM_OK);
	CHECK(r.nsort == 3 && r.sort[0].desc && !strcmp(r.sort[0].field, "age") &&
	      !r.sort[1].desc && r.sort[2].kind == SR_SORT_SCORE && r.sort[2].desc);
	CHECK(sr_request_source_params(&r, "false", NULL, NULL, &err) == CM_OK && !r.fetch_source);
	CHECK(sr_request_source_params(&r, NULL, "a,b.*", "b.c", &err) == CM_OK && r.fetch_source &&
	      r.nincludes == 2 && r.nexcludes == 1);
	CHECK(sr_request_sort_param(&r, "x:up", &err) == CM_EINVAL);
	sr_request_free(&r);

	uint64_t ns;
	memset(&err, 0, sizeof(err));
	CHECK(sr_parse_time_value("100micros", "t", &ns, &err) == CM_OK && ns == 100000);
	CHECK(sr_parse_time_value("2h", "t", &ns, &err) == CM_OK && ns == 7200000000000ull);
	CHECK(sr_parse_time_value("-1", "t", &ns, &err) == CM_OK && ns == 0);
	CHECK(sr_parse_time_value("1.5s", "t", &ns, &err) == CM_OK && ns == 1500000000ull);
	CHECK(sr_parse_time_value("5 parsecs", "t", &ns, &err) == CM_EPARSE);
}

/* ---- source filtering ---- */

static const char *
filt(const char *src, const char *inc, const char *exc)
{
	char *incs[8], *excs[8];
	size_t ni = 0, ne = 0;
	char ib[256], eb[256];
	if (inc) {
		snprintf(ib, sizeof(ib), "%s", inc);
		for (char *t = strtok(ib, ","); t; t = strtok(NULL, ","))
			incs[ni++] = t;
	}
	if (exc) {
		snprintf(eb, sizeof(eb), "%s", exc);
		for (char *t = strtok(eb, ","); t; t = strtok(NULL, ","))
			excs[ne++] = t;
	}
	cm_buf out;
	cm_buf_init(&out, CM_MEM_SEARCH);
	cm_err rc = sr_source_filter(src, strlen(src), incs, ni, excs, ne, &out);
	if (rc)
		snprintf(result, sizeof(result), "ERR");
	else
		snprintf(result, sizeof(result), "%.*s", (int)out.len, (const char *)out.data);
	cm_buf_free(&out);
	return result;
}

#define FILT(src, inc, exc, want)                                                                  \
	do {                                                                                       \
		const char *got_ = filt(src, inc, exc);                                            \
		CHECKF(!strcmp(got_, want), "%s inc=%s exc=%s\n   got  %s\n   want %s", src,       \
		       inc ? inc : "-", exc ? exc : "-", got_, want);                              \
	} while (0)

static void
test_source_filter(void)
{
	const char *doc = "{\"name\":{\"first\":\"A\",\"last\":\"B\"},\"firstName\":\"x\","
	                  "\"age\":1.50,\"tags\":[\"a\",\"b\"],\"obj\":{\"sub\":{\"deep\":1,"
	                  "\"other\":2}},\"list\":[{\"a\":1,\"b\":2},{\"b\":3},5]}";
	FILT(doc, NULL, NULL, doc);
	FILT(doc, "age", NULL, "{\"age\":1.50}");
	FILT(doc, "name", NULL, "{\"name\":{\"first\":\"A\",\"last\":\"B\"}}");
	FILT(doc, "name.first", NULL, "{\"name\":{\"first\":\"A\"}}");
	FILT(doc, "name.*", NULL, "{\"name\":{\"first\":\"A\",\"last\":\"B\"}}");
	FILT(doc, "*Name", NULL, "{\"firstName\":\"x\"}");
	FILT(doc, "*.first", NULL, "{\"name\":{\"first\":\"A\"}}");
	FILT(doc, "*first*", NULL, "{\"name\":{\"first\":\"A\"},\"firstName\":\"x\"}");
	FILT(doc, "obj.sub.deep", NULL, "{\"obj\":{\"sub\":{\"deep\":1}}}");
	FILT(doc, "o*.deep", NULL, "{\"obj\":{\"sub\":{\"deep\":1}}}");
	FILT(doc, "tags", NULL, "{\"tags\":[\"a\",\"b\"]}");
	FILT(doc, "list.b", NULL, "{\"list\":[{\"b\":2},{\"b\":3}]}");
	FILT(doc, "list", NULL, "{\"list\":[{\"a\":1,\"b\":2},{\"b\":3},5]}");
	FILT(doc, "missing", NULL, "{}");
	FILT(doc, "name.first.more", NULL, "{}");
	FILT(doc, NULL, "name",
	     "{\"firstName\":\"x\",\"age\":1.50,\"tags\":[\"a\",\"b\"],\"obj\":{"
	     "\"sub\":{\"deep\":1,\"other\":2}},\"list\":[{\"a\":1,\"b\":2},{"
	     "\"b\":3},5]}");
	FILT(doc, NULL, "*", "{}");
	FILT(doc, "obj", "obj.sub.other", "{\"obj\":{\"sub\":{\"deep\":1}}}");
	FILT(doc, "obj,age", "obj.sub.*", "{\"age\":1.50,\"obj\":{\"sub\":{}}}");
	FILT(doc, "name,list", "*.b",
	     "{\"name\":{\"first\":\"A\",\"last\":\"B\"},\"list\":[{\"a\":1},5]}");
	FILT(doc, NULL, "list.a,tags",
	     "{\"name\":{\"first\":\"A\",\"last\":\"B\"},\"firstName\":"
	     "\"x\",\"age\":1.50,\"obj\":{\"sub\":{\"deep\":1,\"other\":2}},"
	     "\"list\":[{\"b\":2},{\"b\":3},5]}");
	/* dotted keys in the source are paths too */
	FILT("{\"a.b\":1,\"a\":{\"c\":2}}", "a.b", NULL, "{\"a.b\":1}");
	FILT("{\"a.b\":1,\"a\":{\"c\":2}}", "a", NULL, "{\"a.b\":1,\"a\":{\"c\":2}}");
	/* escapes in keys are decoded for matching, kept in output */
	FILT("{\"caf\\u00e9\":1,\"x\":2}", "caf\xc3\xa9", NULL, "{\"caf\\u00e9\":1}");
	/* whitespace is normalized only between kept members, values are raw */
	FILT("{ \"a\" : [ 1 , 2 ] , \"b\" : { \"c\" : true } }", "b", NULL,
	     "{\"b\":{ \"c\" : true }}");
	FILT("{\"a\":[[1,{\"x\":1,\"y\":2}],[]]}", "a.x", NULL, "{\"a\":[[{\"x\":1}]]}");
	FILT("{\"a\":[1,2", "a", NULL, "ERR");
	FILT("{\"a\":1}x", "a", NULL, "ERR");
	FILT("[1]", "a", NULL, "ERR");
	FILT("{\"a\":tru}", NULL, NULL, "ERR");
}

/* ---- merge ---- */

static sr_hit
mkhit(uint32_t shard, uint32_t doc, float score, const char *id)
{
	sr_hit h;
	memset(&h, 0, sizeof(h));
	h.id = cm_strdup(CM_MEM_SEARCH, id);
	h.score = score;
	h.shard = shard;
	h.doc = doc;
	char src[64];
	int n = snprintf(src, sizeof(src), "{\"id\":\"%s\"}", id);
	h.source = cm_strndup(CM_MEM_SEARCH, src, (size_t)n);
	h.source_len = (size_t)n;
	return h;
}

/* Three shards of scored hits: shard s has docs 0..4 with scores that tie
 * across shards, so the tie-break shows. */
static void
make_scored(sr_shard_result *res, uint32_t s)
{
	memset(res, 0, sizeof(*res));
	res->shard = s;
	res->nhits = 5;
	res->hits = cm_calloc(CM_MEM_SEARCH, 5, sizeof(sr_hit));
	for (uint32_t d = 0; d < 5; d++) {
		char id[16];
		snprintf(id, sizeof(id), "s%ud%u", s, d);
		float score = (float)(5 - d) + (s == 1 ? 0.5f : 0.0f);
		res->hits[d] = mkhit(s, d, score, id);
	}
	res->total = 7;
	res->max_score = res->hits[0].score;
}

static char *
merge_scored(const uint32_t *order, size_t n, const char *req_json, bool fail_shard2)
{
	sr_request req;
	cm_error err;
	REQUIRE(req_parse(req_json, &req, &err) == CM_OK);
	sr_merger *m = sr_merger_create(&req, 3);
	sr_merger_set_index(m, "idx");
	for (size_t i = 0; i < n; i++) {
		if (fail_shard2 && order[i] == 2) {
			cm_error e = {0};
			cm_error_set(&e, CM_EIO, "disk on fire");
			sr_merger_fail(m, 2, &e);
			continue;
		}
		sr_shard_result res;
		make_scored(&res, order[i]);
		sr_merger_add(m, &res);
		CHECK(res.hits == NULL && res.nhits == 0);
		sr_shard_result_free(&res);
	}
	cm_buf out;
	cm_buf_init(&out, CM_MEM_SEARCH);
	sr_merger_render(m, 3, &out);
	sr_merger_destroy(m);
	sr_request_free(&req);
	char *s = strndup((const char *)out.data, out.len);
	cm_buf_free(&out);
	return s;
}

static void
test_merge_scored(void)
{
	static const uint32_t orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
	                                      {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
	char *first = merge_scored(orders[0], 3, "{\"size\":4}", false);
	const char *want =
	    "{\"took\":3,\"timed_out\":false,\"_shards\":{\"total\":3,\"successful\":3,\"skipped\":"
	    "0,"
	    "\"failed\":0},\"hits\":{\"total\":{\"value\":21,\"relation\":\"eq\"},\"max_score\":5."
	    "5,"
	    "\"hits\":["
	    "{\"_index\":\"idx\",\"_type\":\"_doc\",\"_id\":\"s1d0\",\"_score\":5.5,\"_source\":{"
	    "\"id\":\"s1d0\"}},"
	    "{\"_index\":\"idx\",\"_type\":\"_doc\",\"_id\":\"s0d0\",\"_score\":5.0,\"_source\":{"
	    "\"id\":\"s0d0\"}},"
	    "{\"_index\":\"idx\",\"_type\":\"_doc\",\"_id\":\"s2d0\",\"_score\":5.0,\"_source\":{"
	    "\"id\":\"s2d0\"}},"
	    "{\"_index\":\"idx\",\"_type\":\"_doc\",\"_id\":\"s1d1\",\"_score\":4.5,\"_source\":{"
	    "\"id\":\"s1d1\"}}]}}";
	CHECKF(!strcmp(first, want), "\n got  %s\n want %s", first, want);
	for (int o = 1; o < 6; o++) {
		char *s = merge_scored(orders[o], 3, "{\"size\":4}", false);
		CHECKF(!strcmp(s, first), "order %d differs:\n%s\n%s", o, s, first);
		free(s);
	}
	free(first);

	/* pagination: from 2, size 3 over the same 15 hits */
	char *page = merge_scored(orders[3], 3, "{\"from\":2,\"size\":3}", false);
	CHECKF(strstr(page, "\"hits\":[{\"_index\":\"idx\",\"_type\":\"_doc\",\"_id\":\"s2d0\"") !=
	           NULL,
	       "%s", page);
	CHECK(strstr(page, "\"_id\":\"s1d1\"") && strstr(page, "\"_id\":\"s0d1\"") &&
	      !strstr(page, "\"_id\":\"s2d1\""));
	free(page);
	/* from beyond the end: no hits, totals still there */
	page = merge_scored(orders[1], 3, "{\"from\":100,\"size\":5}", false);
	CHECKF(strstr(page, "\"hits\":[]") && strstr(page, "\"value\":21"), "%s", page);
	free(page);
	/* size 0: no hits, max_score null */
	page = merge_scored(orders[2], 3, "{\"size\":0}", false);
	CHECKF(strstr(page, "\"max_score\":null,\"hits\":[]"), "%s", page);
	free(page);

	/* totals: clamped to track_total_hits with relation gte */
	page = merge_scored(orders[0], 3, "{\"size\":1,\"track_total_hits\":20}", false);
	CHECKF(strstr(page, "\"total\":{\"value\":20,\"relation\":\"gte\"}"), "%s", page);
	free(page);
	page = merge_scored(orders[0], 3, "{\"size\":1,\"track_total_hits\":21}", false);
	CHECKF(strstr(page, "\"total\":{\"value\":21,\"relation\":\"eq\"}"), "%s", page);
	free(page);
	page = merge_scored(orders[0], 3, "{\"size\":1,\"track_total_hits\":false}", false);
	CHECKF(!strstr(page, "\"total\":{") && strstr(page, "\"hits\":{\"max_score\""), "%s", page);
	free(page);

	/* a failed shard: counted, reported, and its gap does not change order */
	char *f1 = merge_scored(orders[4], 3, "{\"size\":3}", true);
	char *f2 = merge_scored(orders[1], 3, "{\"size\":3}", true);
	CHECK(!strcmp(f1, f2));
	CHECKF(strstr(f1, "\"_shards\":{\"total\":3,\"successful\":2,\"skipped\":0,\"failed\":1,"
	                  "\"failures\":[{\"shard\":2,\"index\":\"idx\",\"reason\":{\"type\":"
	                  "\"io_exception\",\"reason\":\"disk on fire\"}}]}"),
	       "%s", f1);
	CHECK(strstr(f1, "\"value\":14"));
	free(f1);
	free(f2);
}

/* Per-node mode: nodes merge their shards, the coordinator merges nodes;
 * the response equals a flat merge of every shard. */
static void
test_merge_per_node(void)
{
	static const uint32_t flat[3] = {2, 0, 1};
	char *want = merge_scored(flat, 3, "{\"from\":1,\"size\":4}", false);
	for (int variant = 0; variant < 2; variant++) {
		sr_request req;
		cm_error err;
		REQUIRE(req_parse("{\"from\":1,\"size\":4}", &req, &err) == CM_OK);
		sr_merger *top = sr_merger_create(&req, 3);
		sr_merger_set_index(top, "idx");
		/* node A holds shards 0 and 1, node B shard 2 */
		sr_merger *a = sr_merger_create(&req, 2), *b = sr_merger_create(&req, 1);
		sr_shard_result r;
		make_scored(&r, variant ? 1 : 0);
		sr_merger_add(a, &r);
		make_scored(&r, variant ? 0 : 1);
		sr_merger_add(a, &r);
		make_scored(&r, 2);
		sr_merger_add(b, &r);
		sr_shard_result na, nb;
		sr_merger_take(b, 2, &nb);
		sr_merger_take(a, 0, &na);
		CHECK(na.shards_merged == 2 && na.total == 14 && na.nhits == 5);
		sr_merger_add(top, variant ? &na : &nb);
		sr_merger_add(top, variant ? &nb : &na);
		cm_buf out;
		cm_buf_init(&out, CM_MEM_SEARCH);
		sr_merger_render(top, 3, &out);
		CHECKF(out.len == strlen(want) && !memcmp(out.data, want, out.len),
		       "\n got  %.*s\n want %s", (int)out.len, (const char *)out.data, want);
		cm_buf_free(&out);
		sr_merger_destroy(a);
		sr_merger_destroy(b);
		sr_merger_destroy(top);
		sr_request_free(&req);
	}
	free(want);

	/* failures survive the node-level merge */
	sr_request req;
	cm_error err;
	REQUIRE(req_parse("{}", &req, &err) == CM_OK);
	sr_merger *a = sr_merger_create(&req, 2);
	cm_error e = {0};
	cm_error_set(&e, CM_EIO, "gone");
	sr_merger_fail_at(a, 1, "x", "n1", &e);
	sr_shard_result r;
	make_scored(&r, 0);
	sr_merger_add(a, &r);
	CHECK(sr_merger_failed(a) == 1);
	uint32_t shard;
	const char *index, *node;
	const cm_error *why;
	sr_merger_failure(a, 0, &shard, &index, &node, &why);
	CHECK(shard == 1 && !strcmp(index, "x") && !strcmp(node, "n1") && why->code == CM_EIO);
	sr_shard_result na;
	sr_merger_take(a, 0, &na);
	CHECK(na.shards_merged == 1 && na.error.code == CM_OK);
	sr_shard_result_free(&na);
	sr_merger_destroy(a);
	sr_request_free(&req);
}

static void
test_merge_field_sort(void)
{
	/* sort by price asc (missing last), then _score: values given by the shards */
	const char *req_json =
	    "{\"sort\":[{\"price\":{\"order\":\"asc\"}},\"_score\"],\"size\":10}";
	static const uint32_t orders[3][2] = {{0, 1}, {1, 0}, {0, 1}};
	char *outs[2];
	for (int o = 0; o < 2; o++) {
		sr_request req;
		cm_error err;
		REQUIRE(req_parse(req_json, &req, &err) == CM_OK);
		sr_merger *m = sr_merger_create(&req, 2);
		sr_merger_set_index(m, "p");
		for (int k = 0; k < 2; k++) {
			uint32_t s = orders[o][k];
			sr_shard_result res;
			memset(&res, 0, sizeof(res));
			res.shard = s;
			res.nhits = 3;
			res.total = 3;
			res.max_score = NAN;
			res.index = s ? "other" : NULL;
			res.hits = cm_calloc(CM_MEM_SEARCH, 3, sizeof(sr_hit));
			for (uint32_t d = 0; d < 3; d++) {
				char id[16];
				snprintf(id, sizeof(id), "s%ud%u", s, d);
				res.hits[d] = mkhit(s, d, 1.0f + (float)d, id);
				res.hits[d].nsort = 2;
				res.hits[d].sort =
				    cm_calloc(CM_MEM_SEARCH, 2, sizeof(sr_sort_value));
				if (d == 2 && s == 0)
					res.hits[d].sort[0].type = SR_SV_NULL; /* missing */
				else {
					res.hits[d].sort[0].type = SR_SV_DOUBLE;
					res.hits[d].sort[0].d = 10.0 * d + s; /* 0,10 | 1,11,21 */
				}
				res.hits[d].sort[1].type = SR_SV_DOUBLE;
				res.hits[d].sort[1].d = res.hits[d].score;
			}
			sr_merger_add(m, &res);
		}
		cm_buf out;
		cm_buf_init(&out, CM_MEM_SEARCH);
		sr_merger_render(m, 1, &out);
		outs[o] = strndup((const char *)out.data, out.len);
		cm_buf_free(&out);
		sr_merger_destroy(m);
		sr_request_free(&req);
	}
	CHECK(!strcmp(outs[0], outs[1]));
	const char *ids[] = {"s0d0", "s1d0", "s0d1", "s1d1", "s1d2", "s0d2"};
	const char *p = outs[0];
	for (int i = 0; i < 6; i++) {
		char pat[32];
		snprintf(pat, sizeof(pat), "\"_id\":\"%s\"", ids[i]);
		const char *q = strstr(p, pat);
		CHECKF(q != NULL, "%s missing or out of order in %s", ids[i], outs[0]);
		if (q)
			p = q;
	}
	CHECKF(strstr(outs[0], "{\"_index\":\"other\",\"_type\":\"_doc\",\"_id\":\"s1d0\","
	                       "\"_score\":1.0,\"_source\":{\"id\":\"s1d0\"},\"sort\":[1.0,1.0]}"),
	       "%s", outs[0]);
	CHECKF(strstr(outs[0], "\"_id\":\"s0d2\",\"_score\":3.0,\"_source\":{\"id\":\"s0d2\"},"
	                       "\"sort\":[null,3.0]}"),
	       "%s", outs[0]);
	CHECK(strstr(outs[0], "\"max_score\":null"));
	free(outs[0]);
	free(outs[1]);

	/* desc with missing first; field sort only → _score null */
	sr_request req;
	cm_error err;
	REQUIRE(req_parse("{\"sort\":[{\"k\":{\"order\":\"desc\",\"missing\":\"_first\"}}],"
	                  "\"version\":true,\"seq_no_primary_term\":true}",
	                  &req, &err) == CM_OK);
	sr_merger *m = sr_merger_create(&req, 1);
	sr_merger_set_index(m, "k");
	sr_shard_result res;
	memset(&res, 0, sizeof(res));
	res.nhits = 3;
	res.total = 3;
	res.max_score = NAN;
	res.hits = cm_calloc(CM_MEM_SEARCH, 3, sizeof(sr_hit));
	const char *keys[] = {"apple", NULL, "zebra"};
	for (uint32_t d = 0; d < 3; d++) {
		char id[8];
		snprintf(id, sizeof(id), "%u", d);
		res.hits[d] = mkhit(0, d, NAN, id);
		res.hits[d].version = 3;
		res.hits[d].seq_no = 7 + d;
		res.hits[d].primary_term = 1;
		res.hits[d].nsort = 1;
		res.hits[d].sort = cm_calloc(CM_MEM_SEARCH, 1, sizeof(sr_sort_value));
		if (keys[d]) {
			res.hits[d].sort[0].type = SR_SV_STRING;
			res.hits[d].sort[0].s = cm_strdup(CM_MEM_SEARCH, keys[d]);
		}
	}
	sr_merger_add(m, &res);
	cm_buf out;
	cm_buf_init(&out, CM_MEM_SEARCH);
	sr_merger_render(m, 0, &out);
	const char *want =
	    "\"hits\":[{\"_index\":\"k\",\"_type\":\"_doc\",\"_id\":\"1\",\"_version\":3,\"_seq_"
	    "no\":8,"
	    "\"_primary_term\":1,\"_score\":null,\"_source\":{\"id\":\"1\"},\"sort\":[null]},"
	    "{\"_index\":\"k\",\"_type\":\"_doc\",\"_id\":\"2\",\"_version\":3,\"_seq_no\":9,"
	    "\"_primary_term\":1,\"_score\":null,\"_source\":{\"id\":\"2\"},\"sort\":[\"zebra\"]},"
	    "{\"_index\":\"k\",\"_type\":\"_doc\",\"_id\":\"0\",\"_version\":3,\"_seq_no\":7,"
	    "\"_primary_term\":1,\"_score\":null,\"_source\":{\"id\":\"0\"},\"sort\":[\"apple\"]}]";
	CHECKF(strstr((const char *)out.data, want) != NULL, "\n%.*s", (int)out.len,
	       (const char *)out.data);
	cm_buf_free(&out);
	sr_merger_destroy(m);
	sr_request_free(&req);
}

static void
test_merge_misc(void)
{
	/* all shards failed → reduce reports the first failure's status */
	sr_request req;
	cm_error err;
	REQUIRE(req_parse("{}", &req, &err) == CM_OK);
	sr_merger *m = sr_merger_create(&req, 2);
	cm_error e1 = {0}, e2 = {0};
	cm_error_set(&e1, CM_EPARSE, "bad thing");
	cm_error_set(&e2, CM_EPARSE, "bad thing");
	sr_merger_fail_at(m, 1, "a", "node-1", &e2);
	sr_merger_fail_at(m, 0, "a", "node-0", &e1);
	memset(&err, 0, sizeof(err));
	CHECK(sr_merger_reduce(m, &err) == CM_EPARSE);
	CHECK(!strcmp(cm_error_type(&err), "search_phase_execution_exception"));
	CHECK(!strcmp(err.reason, "all shards failed"));
	CHECK(sr_merger_failed(m) == 2);
	cm_buf out;
	cm_buf_init(&out, CM_MEM_SEARCH);
	sr_merger_render(m, 0, &out);
	/* identical failures are grouped (one entry) as ES does */
	CHECKF(strstr((const char *)out.data,
	              "\"failed\":2,\"failures\":[{\"shard\":0,\"index\":\"a\",\"node\":\"node-0\","
	              "\"reason\":{\"type\":\"parsing_exception\",\"reason\":\"bad thing\"}}]}") !=
	           NULL,
	       "%.*s", (int)out.len, (const char *)out.data);
	cm_buf_free(&out);
	sr_merger_destroy(m);
	sr_request_free(&req);

	/* a failure reported without an index takes the one the other shards named */
	REQUIRE(req_parse("{}", &req, &err) == CM_OK);
	m = sr_merger_create(&req, 2);
	sr_shard_result ok;
	memset(&ok, 0, sizeof(ok));
	ok.shard = 0;
	ok.index = "logs";
	sr_merger_add(m, &ok);
	sr_merger_fail(m, 1, &e1);
	cm_buf_init(&out, CM_MEM_SEARCH);
	sr_merger_render(m, 0, &out);
	CHECKF(strstr((const char *)out.data, "\"failures\":[{\"shard\":1,\"index\":\"logs\",") != NULL,
	       "%.*s", (int)out.len, (const char *)out.data);
	cm_buf_free(&out);
	sr_merger_destroy(m);
	sr_request_free(&req);

	/* no shards at all: an empty, valid answer */
	REQUIRE(req_parse("{}", &req, &err) == CM_OK);
	m = sr_merger_create(&req, 0);
	memset(&err, 0, sizeof(err));
	CHECK(sr_merger_reduce(m, &err) == CM_OK);
	cm_buf_init(&out, CM_MEM_SEARCH);
	sr_merger_render(m, 2, &out);
	const char *want =
	    "{\"took\":2,\"timed_out\":false,\"_shards\":{\"total\":0,\"successful\":0,"
	    "\"skipped\":0,\"failed\":0},\"hits\":{\"total\":{\"value\":0,\"relation\":"
	    "\"eq\"},\"max_score\":null,\"hits\":[]}}";
	CHECKF(out.len == strlen(want) && !memcmp(out.data, want, out.len), "%.*s", (int)out.len,
	       (const char *)out.data);
	cm_buf_free(&out);
	sr_merger_destroy(m);
	sr_request_free(&req);

	/* timed out and lower-bound totals; terminated_early shown with terminate_after */
	REQUIRE(req_parse("{\"terminate_after\":5}", &req, &err) == CM_OK);
	m = sr_merger_create(&req, 2);
	sr_shard_result r;
	memset(&r, 0, sizeof(r));
	r.shard = 0;
	r.total = 5;
	r.terminated_early = true;
	r.max_score = 1.0f;
	sr_merger_add(m, &r);
	memset(&r, 0, sizeof(r));
	r.shard = 1;
	r.total = 3;
	r.timed_out = true;
	r.total_is_lower_bound = true;
	r.max_score = 2.5f;
	sr_merger_add(m, &r);
	cm_buf_init(&out, CM_MEM_SEARCH);
	sr_merger_render(m, 9, &out);
	want = "{\"took\":9,\"timed_out\":true,\"terminated_early\":true,\"_shards\":{\"total\":2,"
	       "\"successful\":2,\"skipped\":0,\"failed\":0},\"hits\":{\"total\":{\"value\":8,"
	       "\"relation\":\"gte\"},\"max_score\":2.5,\"hits\":[]}}";
	CHECKF(out.len == strlen(want) && !memcmp(out.data, want, out.len), "%.*s", (int)out.len,
	       (const char *)out.data);
	CHECK(sr_merger_total(m) == 8);
	cm_buf_free(&out);
	sr_merger_destroy(m);
	sr_request_free(&req);

	/* aggregations: empty partials from each shard merge and render */
	REQUIRE(req_parse("{\"size\":0,\"aggs\":{\"hi\":{\"max\":{\"field\":\"n\"}}}}", &req,
	                  &err) == CM_OK);
	char *outs[2];
	for (int o = 0; o < 2; o++) {
		m = sr_merger_create(&req, 3);
		for (int k = 0; k < 3; k++) {
			memset(&r, 0, sizeof(r));
			r.shard = (uint32_t)(o ? 2 - k : k);
			r.aggs = sr_agg_state_new(req.aggs);
			sr_merger_add(m, &r);
		}
		memset(&err, 0, sizeof(err));
		CHECK(sr_merger_reduce(m, &err) == CM_OK);
		cm_buf_init(&out, CM_MEM_SEARCH);
		sr_merger_render(m, 0, &out);
		outs[o] = strndup((const char *)out.data, out.len);
		cm_buf_free(&out);
		sr_merger_destroy(m);
	}
	CHECKF(strstr(outs[0], ",\"aggregations\":{\"hi\":{\"value\":null}}}") != NULL, "%s",
	       outs[0]);
	CHECK(!strcmp(outs[0], outs[1]));
	free(outs[0]);
	free(outs[1]);
	sr_request_free(&req);
}

/* ---- model checks: random inputs against simple reference versions ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t
rnd(uint32_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state % n);
}

/* Recursive glob: '*' any run. Independent of the filter's state sets. */
static bool
ref_glob(const char *p, const char *s)
{
	if (!*p)
		return !*s;
	if (*p == '*')
		return ref_glob(p + 1, s) || (*s && ref_glob(p, s + 1));
	return *s == *p && ref_glob(p + 1, s + 1);
}

/* Could some extension of s match p? */
static bool
ref_glob_prefix(const char *p, const char *s)
{
	if (!*s)
		return true;
	if (!*p)
		return false;
	if (*p == '*')
		return ref_glob_prefix(p + 1, s) || ref_glob_prefix(p, s + 1);
	return *s == *p && ref_glob_prefix(p + 1, s + 1);
}

/* ES's makeMatchDotsInFieldNames: p matches the path or a dot-prefix. */
static bool
ref_accept(char **pats, size_t n, const char *path)
{
	char buf[256];
	for (size_t i = 0; i < n; i++) {
		if (ref_glob(pats[i], path))
			return true;
		for (const char *d = strchr(path, '.'); d; d = strchr(d + 1, '.')) {
			snprintf(buf, sizeof(buf), "%.*s", (int)(d - path), path);
			if (ref_glob(pats[i], buf))
				return true;
		}
	}
	return false;
}

static bool
ref_live(char **pats, size_t n, const char *path)
{
	if (ref_accept(pats, n, path))
		return true;
	for (size_t i = 0; i < n; i++)
		if (ref_glob_prefix(pats[i], path))
			return true;
	return false;
}

typedef struct refctx {
	char **inc, **exc;
	size_t ni, ne;
} refctx;

static cJSON *ref_filter_obj(refctx *r, const cJSON *obj, const char *prefix, bool inc_all);

static cJSON *
ref_filter_arr(refctx *r, const cJSON *arr, const char *path, bool inc_all)
{
	cJSON *out = cJSON_CreateArray();
	bool inc_here = inc_all || r->ni == 0 || ref_accept(r->inc, r->ni, path);
	char pre[256];
	snprintf(pre, sizeof(pre), "%s.", path);
	for (const cJSON *e = arr->child; e; e = e->next) {
		cJSON *f = NULL;
		if (cJSON_IsObject(e)) {
			f = ref_filter_obj(r, e, pre, inc_all);
			if (!f->child) {
				cJSON_Delete(f);
				f = NULL;
			}
		} else if (cJSON_IsArray(e)) {
			f = ref_filter_arr(r, e, path, inc_all);
			if (!f->child) {
				cJSON_Delete(f);
				f = NULL;
			}
		} else if (inc_here)
			f = cJSON_Duplicate(e, true);
		if (f)
			cJSON_AddItemToArray(out, f);
	}
	return out;
}

static cJSON *
ref_filter_obj(refctx *r, const cJSON *obj, const char *prefix, bool inc_all)
{
	cJSON *out = cJSON_CreateObject();
	for (const cJSON *e = obj->child; e; e = e->next) {
		char path[256], below[260];
		snprintf(path, sizeof(path), "%s%s", prefix, e->string);
		bool inc = inc_all || r->ni == 0 || ref_accept(r->inc, r->ni, path);
		if (!inc && !ref_live(r->inc, r->ni, path))
			continue;
		if (r->ne && ref_accept(r->exc, r->ne, path))
			continue;
		snprintf(below, sizeof(below), "%s.", path);
		bool exc_below = r->ne && ref_live(r->exc, r->ne, below);
		cJSON *f = NULL;
		if (inc && !exc_below)
			f = cJSON_Duplicate(e, true);
		else if (cJSON_IsObject(e)) {
			f = ref_filter_obj(r, e, below, inc);
			if (!inc && !f->child) {
				cJSON_Delete(f);
				f = NULL;
			}
		} else if (cJSON_IsArray(e)) {
			f = ref_filter_arr(r, e, path, inc);
			if (!inc && !f->child) {
				cJSON_Delete(f);
				f = NULL;
			}
		} else if (inc)
			f = cJSON_Duplicate(e, true);
		if (f)
			cJSON_AddItemToObject(out, e->string, f);
	}
	return out;
}

static cJSON *
random_value(int depth)
{
	static const char *keys[] = {"a", "b", "c", "ab", "bc", "a1"};
	uint32_t k = rnd(depth > 3 ? 3 : 6);
	if (k == 0)
		return cJSON_CreateNumber(rnd(100));
	if (k == 1)
		return cJSON_CreateString(keys[rnd(6)]);
	if (k == 2)
		return cJSON_CreateBool(rnd(2));
	if (k == 3 || k == 4) {
		cJSON *o = cJSON_CreateObject();
		uint32_t n = rnd(4);
		for (uint32_t i = 0; i < n; i++) {
			const char *key = keys[rnd(6)];
			if (!cJSON_GetObjectItemCaseSensitive(o, key))
				cJSON_AddItemToObject(o, key, random_value(depth + 1));
		}
		return o;
	}
	cJSON *a = cJSON_CreateArray();
	uint32_t n = rnd(4);
	for (uint32_t i = 0; i < n; i++)
		cJSON_AddItemToArray(a, random_value(depth + 1));
	return a;
}

static void
test_source_filter_model(void)
{
	static const char *pats[] = {"a",  "b",   "a.b", "a.*", "*b",    "*",    "b.c",
	                             "a*", "*.c", "c",   "ab",  "a.b.c", "*.a1", "bc.*"};
	int mismatches = 0;
	for (int iter = 0; iter < 3000; iter++) {
		cJSON *doc = cJSON_CreateObject();
		uint32_t n = 1 + rnd(5);
		for (uint32_t i = 0; i < n; i++) {
			static const char *keys[] = {"a", "b", "c", "ab", "bc", "a1"};
			const char *key = keys[rnd(6)];
			if (!cJSON_GetObjectItemCaseSensitive(doc, key))
				cJSON_AddItemToObject(doc, key, random_value(1));
		}
		char *inc[3], *exc[3];
		size_t ni = rnd(3), ne = rnd(3);
		for (size_t i = 0; i < ni; i++)
			inc[i] = (char *)pats[rnd(14)];
		for (size_t i = 0; i < ne; i++)
			exc[i] = (char *)pats[rnd(14)];
		refctx r = {inc, exc, ni, ne};
		cJSON *want = ref_filter_obj(&r, doc, "", false);
		char *src = cJSON_PrintUnformatted(doc);
		char *want_s = cJSON_PrintUnformatted(want);
		cm_buf out;
		cm_buf_init(&out, CM_MEM_SEARCH);
		cm_err rc = sr_source_filter(src, strlen(src), inc, ni, exc, ne, &out);
		char *got = strndup((const char *)out.data, out.len);
		if (rc || strcmp(got, want_s)) {
			if (mismatches++ < 5) {
				fprintf(stderr, "source filter model mismatch: %s\n inc:", src);
				for (size_t i = 0; i < ni; i++)
					fprintf(stderr, " %s", inc[i]);
				fprintf(stderr, " exc:");
				for (size_t i = 0; i < ne; i++)
					fprintf(stderr, " %s", exc[i]);
				fprintf(stderr, "\n got  %s\n want %s\n", got, want_s);
			}
		}
		free(got);
		cm_buf_free(&out);
		free(src);
		free(want_s);
		cJSON_Delete(want);
		cJSON_Delete(doc);
	}
	CHECKF(mismatches == 0, "%d source filter mismatches", mismatches);
}

/* Random shard results merged in random order against sorting everything. */
typedef struct refhit {
	uint32_t shard, doc;
	float score;
	bool has_v;
	int64_t v;
} refhit;

static bool ref_desc, ref_missing_first, ref_by_field;

static int
ref_cmp(const void *a, const void *b)
{
	const refhit *x = a, *y = b;
	int c = 0;
	if (ref_by_field) {
		if (x->has_v != y->has_v)
			c = (x->has_v ? 1 : -1) * (ref_missing_first ? 1 : -1);
		else if (x->has_v)
			c = (x->v < y->v ? -1 : x->v > y->v) * (ref_desc ? -1 : 1);
	} else
		c = x->score > y->score ? -1 : x->score < y->score;
	if (!c)
		c = x->shard < y->shard ? -1 : x->shard > y->shard;
	if (!c)
		c = x->doc < y->doc ? -1 : x->doc > y->doc;
	return c;
}

static void
test_merge_model(void)
{
	int bad = 0;
	for (int iter = 0; iter < 300; iter++) {
		uint32_t nshards = 1 + rnd(6);
		ref_by_field = rnd(2);
		ref_desc = rnd(2);
		ref_missing_first = rnd(2);
		uint32_t from = rnd(8), size = rnd(12);
		char body[256];
		snprintf(
		    body, sizeof(body),
		    ref_by_field ? "{\"from\":%u,\"size\":%u,\"sort\":[{\"v\":{\"order\":\"%s\","
		                   "\"missing\":\"%s\"}}]}"
		                 : "{\"from\":%u,\"size\":%u}",
		    from, size, ref_desc ? "desc" : "asc", ref_missing_first ? "_first" : "_last");
		sr_request req;
		cm_error err;
		REQUIRE(req_parse(body, &req, &err) == CM_OK);
		refhit all[6 * 20];
		size_t nall = 0;
		sr_shard_result res[6];
		for (uint32_t s = 0; s < nshards; s++) {
			memset(&res[s], 0, sizeof(res[s]));
			res[s].shard = s;
			uint32_t n = rnd(20);
			res[s].hits = cm_calloc(CM_MEM_SEARCH, n + 1, sizeof(sr_hit));
			res[s].nhits = n;
			res[s].total = n;
			res[s].max_score = NAN;
			for (uint32_t d = 0; d < n; d++) {
				refhit *h = &all[nall++];
				h->shard = s;
				h->doc = d * 3 + rnd(3);
				h->score = (float)rnd(4); /* many ties */
				h->has_v = rnd(5) != 0;
				h->v = (int64_t)rnd(6) - 2;
				char id[32];
				snprintf(id, sizeof(id), "%u-%u", s, h->doc);
				res[s].hits[d] = mkhit(s, h->doc, h->score, id);
				if (ref_by_field) {
					res[s].hits[d].nsort = 1;
					res[s].hits[d].sort =
					    cm_calloc(CM_MEM_SEARCH, 1, sizeof(sr_sort_value));
					res[s].hits[d].sort[0].type =
					    h->has_v ? SR_SV_LONG : SR_SV_NULL;
					res[s].hits[d].sort[0].l = h->v;
				}
			}
		}
		qsort(all, nall, sizeof(refhit), ref_cmp);
		/* expected id sequence */
		char want[4096] = "", got[4096] = "";
		for (size_t i = from; i < nall && i < (size_t)from + size; i++) {
			char id[40];
			snprintf(id, sizeof(id), "\"_id\":\"%u-%u\"", all[i].shard, all[i].doc);
			strcat(want, id);
		}
		/* arrival order: a random permutation */
		uint32_t perm[6];
		for (uint32_t i = 0; i < nshards; i++)
			perm[i] = i;
		for (uint32_t i = nshards; i > 1; i--) {
			uint32_t j = rnd(i), t = perm[i - 1];
			perm[i - 1] = perm[j];
			perm[j] = t;
		}
		sr_merger *m = sr_merger_create(&req, nshards);
		sr_merger_set_index(m, "i");
		for (uint32_t i = 0; i < nshards; i++)
			sr_merger_add(m, &res[perm[i]]);
		cm_buf out;
		cm_buf_init(&out, CM_MEM_SEARCH);
		sr_merger_render(m, 0, &out);
		cm_buf_put_u8(&out, 0);
		for (const char *p = strstr((const char *)out.data, "\"_id\":\""); p;
		     p = strstr(p + 1, "\"_id\":\"")) {
			const char *e = strchr(p + 7, '"');
			strncat(got, p, (size_t)(e - p + 1));
		}
		char tot[64];
		snprintf(tot, sizeof(tot), "\"total\":{\"value\":%zu,\"relation\":\"eq\"}", nall);
		if (strcmp(got, want) || !strstr((const char *)out.data, tot)) {
			if (bad++ < 3)
				fprintf(stderr, "merge model mismatch (%s):\n got  %s\n want %s\n",
				        body, got, want);
		}
		cm_buf_free(&out);
		sr_merger_destroy(m);
		sr_request_free(&req);
	}
	CHECKF(bad == 0, "%d merge model mismatches", bad);
}

static const char *
fmt_num(double v, bool is_float)
{
	cm_buf b;
	cm_buf_init(&b, CM_MEM_SEARCH);
	if (is_float)
		sr_jw_float(&b, (float)v);
	else
		sr_jw_double(&b, v);
	snprintf(result, sizeof(result), "%.*s", (int)b.len, (const char *)b.data);
	cm_buf_free(&b);
	return result;
}

/* Java's Float/Double.toString forms, as Elasticsearch writes numbers */
static void
test_number_format(void)
{
	static const struct {
		double v;
		bool f;
		const char *want;
	} cases[] = {
	    {5.5, true, "5.5"},
	    {1.0, true, "1.0"},
	    {0.29767057, true, "0.29767057"},
	    {1e-4, true, "1.0E-4"},
	    {1e7, true, "1.0E7"},
	    {123456.78, true, "123456.78"},
	    {0.001, true, "0.001"},
	    {-2.5, true, "-2.5"},
	    {0.0, true, "0.0"},
	    {1.3862944, true, "1.3862944"},
	    {9999999.0, true, "9999999.0"},
	    {0.1, false, "0.1"},
	    {1234567.0, false, "1234567.0"},
	    {1e21, false, "1.0E21"},
	    {3.0000000000000004, false, "3.0000000000000004"},
	    {1.5e-7, false, "1.5E-7"},
	    {NAN, true, "null"},
	    {INFINITY, false, "null"},
	};
	/* each twice in a row: the second float comes from sr_jw_float's memo */
	for (size_t k = 0; k < 2 * sizeof(cases) / sizeof(cases[0]); k++) {
		size_t i = k / 2;
		const char *got = fmt_num(cases[i].v, cases[i].f);
		CHECKF(!strcmp(got, cases[i].want), "%g → %s, want %s", cases[i].v, got,
		       cases[i].want);
	}
	char t[32];
	sr_jw_number_text(5, t, sizeof(t));
	CHECK(!strcmp(t, "5"));
	sr_jw_number_text(-0.25, t, sizeof(t));
	CHECK(!strcmp(t, "-0.25"));
	sr_jw_number_text(0.1, t, sizeof(t));
	CHECK(!strcmp(t, "0.1"));
	cm_buf b;
	cm_buf_init(&b, CM_MEM_SEARCH);
	sr_jw_str(&b, "a\"b\\c\n\x01\xc3\xa9", 9);
	CHECK(b.len == 19 && !memcmp(b.data, "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9\"", 19));
	cm_buf_free(&b);
}

/* Integers beyond 2^53 in a search body become their exact text. */
static void
test_exact_integers(void)
{
	const char *src = "{\"a\":9007199254740993, \"b\":\"9007199254740993 7\",\"c\":[1,"
	                  "-9223372036854775808,1.5e300,18446744073709551615],\"d\":{\"e\":9007199254740992"
	                  ",\"f\":true,\"g\":null,\"h\":2.5}}";
	cJSON *j = cJSON_Parse(src);
	REQUIRE(j);
	sr_json_exact_integers(j, src, strlen(src));
	cJSON *a = cJSON_GetObjectItem(j, "a"), *c = cJSON_GetObjectItem(j, "c");
	cJSON *d = cJSON_GetObjectItem(j, "d");
	CHECK(cJSON_IsString(a) && !strcmp(a->valuestring, "9007199254740993"));
	CHECK(cJSON_IsString(cJSON_GetObjectItem(j, "b")));
	CHECK(cJSON_IsNumber(cJSON_GetArrayItem(c, 0)));
	CHECK(cJSON_IsString(cJSON_GetArrayItem(c, 1)) &&
	      !strcmp(cJSON_GetArrayItem(c, 1)->valuestring, "-9223372036854775808"));
	CHECK(cJSON_IsNumber(cJSON_GetArrayItem(c, 2))); /* not an integer literal */
	CHECK(cJSON_IsString(cJSON_GetArrayItem(c, 3)) &&
	      !strcmp(cJSON_GetArrayItem(c, 3)->valuestring, "18446744073709551615"));
	CHECK(cJSON_IsString(cJSON_GetObjectItem(d, "e")));
	CHECK(cJSON_IsNumber(cJSON_GetObjectItem(d, "h")));
	/* the term query reads the text */
	sr_query *q = NULL;
	cm_error err;
	cJSON *tq = cJSON_Parse("{\"term\":{\"x\":0}}");
	cJSON_ReplaceItemInObject(cJSON_GetObjectItem(tq, "term"), "x",
	                          cJSON_Duplicate(cJSON_GetObjectItem(j, "a"), 1));
	CHECK(sr_query_from_json(tq, &q, &err) == CM_OK && q && !strcmp(q->value, "9007199254740993"));
	sr_query_free(q);
	cJSON_Delete(tq);
	cJSON_Delete(j);
	/* the variant that keeps numbers numbers, with their text */
	const char *src2 = "[9007199254740993,2]";
	j = cJSON_Parse(src2);
	sr_json_number_texts(j, src2, strlen(src2));
	CHECK(cJSON_IsNumber(cJSON_GetArrayItem(j, 0)) &&
	      !strcmp(cJSON_GetArrayItem(j, 0)->valuestring, "9007199254740993"));
	CHECK(cJSON_GetArrayItem(j, 1)->valuestring == NULL);
	cJSON_Delete(j);
	/* a tree whose numbers do not pair with the text stays as it is */
	j = cJSON_Parse("{\"a\":9007199254740993}");
	sr_json_exact_integers(j, "{}", 2);
	CHECK(cJSON_IsNumber(cJSON_GetObjectItem(j, "a")));
	cJSON_Delete(j);
}

int
main(void)
{
	void (*tests[])(void) = {
	    test_leaf_queries, test_match_family,     test_compound,     test_errors,
	    test_query_string, test_query_string_dsl, test_request,      test_source_filter,
	    test_merge_scored, test_merge_field_sort, test_merge_misc,   test_source_filter_model,
	    test_merge_model,  test_merge_per_node,   test_number_format, test_exact_integers};
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		tests[i]();
		/* every allocation made by the code under test is returned */
		CHECKF(cm_mem_used(CM_MEM_SEARCH) == 0, "test %zu leaks %lld bytes", i,
		       (long long)cm_mem_used(CM_MEM_SEARCH));
	}
	return check_report("dsl_test");
}
