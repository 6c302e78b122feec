/* Mappings, document parsing and dates. */
#include "storage/st_types.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

#ifndef SAMPLE_DIR
#define SAMPLE_DIR "/work/main/cluster-scripts/sample"
#endif

static st_mapping *
mapping_of(const char *json, cm_error *err)
{
	cJSON *j = cJSON_Parse(json);
	REQUIRE(j != NULL);
	st_mapping *m = NULL;
	cm_error_clear(err);
	cm_err e = st_mapping_from_json(j, &m, err);
	cJSON_Delete(j);
	if (e != CM_OK) {
		CHECK(m == NULL);
		return NULL;
	}
	return m;
}

static char *
render(const st_mapping *m)
{
	cJSON *j = st_mapping_to_json(m);
	char *s = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	return s;
}

static const st_field_def *
fd(const st_mapping *m, const char *path)
{
	return st_mapping_find(m, path);
}

/* values of `path` in d, rendered "a|b|c" */
static const char *
vals(const st_doc *d, const char *path, char *buf, size_t cap)
{
	size_t n = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < d->nvalues; i++) {
		const st_value *v = &d->values[i];
		if (strcmp(v->field->path, path) != 0)
			continue;
		int w;
		switch (v->field->type) {
		case ST_FT_TEXT:
		case ST_FT_KEYWORD:
			w = snprintf(buf + n, cap - n, "%s%.*s", n ? "|" : "", (int)v->n, v->s);
			break;
		case ST_FT_DOUBLE:
		case ST_FT_FLOAT:
			w = snprintf(buf + n, cap - n, "%s%g", n ? "|" : "", v->d);
			break;
		default:
			w = snprintf(buf + n, cap - n, "%s%lld", n ? "|" : "", (long long)v->i);
			break;
		}
		if (w > 0 && (size_t)w < cap - n)
			n += (size_t)w;
	}
	return buf;
}

static void
test_dates(void)
{
	int64_t ms;
	char buf[40];
	CHECK(st_date_parse("2024-01-31", 10, NULL, &ms) && ms == 1706659200000LL);
	CHECK(st_date_parse("2024-01-31T10:00:00Z", 20, NULL, &ms) && ms == 1706695200000LL);
	CHECK(st_date_parse("2024-01-31T10:00:00.123Z", 24, NULL, &ms) && ms == 1706695200123LL);
	CHECK(st_date_parse("2024-01-31T10:00:00.123456789Z", 30, NULL, &ms) &&
	      ms == 1706695200123LL);
	CHECK(st_date_parse("2024-01-31T12:00:00+02:00", 25, NULL, &ms) && ms == 1706695200000LL);
	CHECK(st_date_parse("2024-01-31T05:00:00-0500", 24, NULL, &ms) && ms == 1706695200000LL);
	CHECK(st_date_parse("2024-01-31T10:00", 16, NULL, &ms) && ms == 1706695200000LL);
	CHECK(st_date_parse("2024-01-31T10", 13, NULL, &ms) && ms == 1706695200000LL);
	CHECK(st_date_parse("2024", 4, NULL, &ms) && ms == 1704067200000LL);
	CHECK(st_date_parse("2024-02", 7, NULL, &ms) && ms == 1706745600000LL);
	CHECK(st_date_parse("1706695200000", 13, NULL, &ms) && ms == 1706695200000LL);
	CHECK(st_date_parse("-1000", 5, NULL, &ms) && ms == -1000);
	CHECK(st_date_parse("1969-12-31T23:59:59.999Z", 24, NULL, &ms) && ms == -1);
	CHECK(st_date_parse("2000-02-29", 10, NULL, &ms) && ms == 951782400000LL);
	CHECK(!st_date_parse("2001-02-29", 10, NULL, &ms));
	CHECK(!st_date_parse("2024-13-01", 10, NULL, &ms));
	CHECK(!st_date_parse("2024-01-31T25:00", 16, NULL, &ms));
	CHECK(!st_date_parse("2024-1-5", 8, NULL, &ms)); /* strict wants two digits */
	CHECK(st_date_parse("2024-1-5", 8, "date_optional_time", &ms) && ms == 1704412800000LL);
	CHECK(!st_date_parse("hello", 5, NULL, &ms));
	CHECK(!st_date_parse("", 0, NULL, &ms));
	CHECK(!st_date_parse("2024-01-31T10:00:00Zjunk", 24, NULL, &ms));
	CHECK(st_date_parse("1706695200", 10, "epoch_second", &ms) && ms == 1706695200000LL);
	CHECK(st_date_parse("1706695200.5", 12, "epoch_second", &ms) && ms == 1706695200500LL);
	CHECK(st_date_parse("2024/01/31", 10, "yyyy/MM/dd", &ms) && ms == 1706659200000LL);
	CHECK(st_date_parse("2024-01-31 10:00:00", 19, "yyyy-MM-dd HH:mm:ss", &ms) &&
	      ms == 1706695200000LL);
	CHECK(st_date_parse("20240131", 8, "basic_date", &ms) && ms == 1706659200000LL);
	CHECK(st_date_parse("20240131T100000.000Z", 20, "basic_date_time", &ms) &&
	      ms == 1706695200000LL);
	CHECK(st_date_parse("2024/01/31", 10, "yyyy-MM-dd||yyyy/MM/dd", &ms) &&
	      ms == 1706659200000LL);
	CHECK(st_date_parse("31/01/2024", 10, "dd/MM/yyyy", &ms) && ms == 1706659200000LL);
	CHECK(st_date_parse("2024-01-31", 10, "yyyy-MM-dd['T'HH:mm]", &ms) &&
	      ms == 1706659200000LL);
	CHECK(st_date_parse("2024-01-31T10:00", 16, "yyyy-MM-dd['T'HH:mm]", &ms) &&
	      ms == 1706695200000LL);
	CHECK(!st_date_parse("2024/01/31", 10, "yyyy-MM-dd", &ms));
	/* "20240131" is not a strict ISO date, so the default falls to epoch_millis */
	CHECK(st_date_parse("20240131", 8, NULL, &ms) && ms == 20240131);
	CHECK(st_date_format_valid(NULL));
	CHECK(st_date_format_valid("yyyy-MM-dd HH:mm:ss||epoch_millis"));
	CHECK(st_date_format_valid("strict_date_optional_time"));
	CHECK(!st_date_format_valid("yyyy-QQ"));
	CHECK(!st_date_format_valid("no_such_format"));
	CHECK(!st_date_format_valid("yyyy||"));
	CHECK(!st_date_format_valid("yyyy-MM-dd'T"));

	st_date_format(1706695200123LL, buf, sizeof(buf));
	CHECK(strcmp(buf, "2024-01-31T10:00:00.123Z") == 0);
	st_date_format(-1, buf, sizeof(buf));
	CHECK(strcmp(buf, "1969-12-31T23:59:59.999Z") == 0);
	st_date_format(0, buf, sizeof(buf));
	CHECK(strcmp(buf, "1970-01-01T00:00:00.000Z") == 0);
	/* round trip over a spread of instants, including before 1970 and leap days */
	for (int64_t t = -5000000000000LL; t < 5000000000000LL; t += 7777777777LL + 13) {
		st_date_format(t, buf, sizeof(buf));
		CHECKF(st_date_parse(buf, strlen(buf), NULL, &ms) && ms == t, "%s", buf);
	}
}

static const char *full_mapping =
    "{\"dynamic\":\"strict\",\"properties\":{"
    "\"title\":{\"type\":\"text\",\"analyzer\":\"english\",\"fields\":{\"raw\":{\"type\":"
    "\"keyword\",\"ignore_above\":10}}},"
    "\"tag\":{\"type\":\"keyword\",\"doc_values\":false},"
    "\"n\":{\"type\":\"integer\",\"index\":false},"
    "\"when\":{\"type\":\"date\",\"format\":\"yyyy/MM/dd||epoch_millis\"},"
    "\"user\":{\"dynamic\":true,\"properties\":{\"name\":{\"type\":\"text\",\"search_analyzer\":"
    "\"simple\"},\"age\":{\"type\":\"short\"}}},"
    "\"a.b.c\":{\"type\":\"boolean\"},"
    "\"score\":{\"type\":\"double\"}}}";

static void
test_mapping_parse_render(void)
{
	cm_error err;
	st_mapping *m = mapping_of(full_mapping, &err);
	REQUIRE(m != NULL);
	CHECK(m->dynamic == ST_DYNAMIC_STRICT);
	const st_field_def *f = fd(m, "title");
	REQUIRE(f != NULL);
	CHECK(f->type == ST_FT_TEXT && f->analyzer == ST_AN_ENGLISH &&
	      f->search_analyzer == ST_AN_ENGLISH && !f->doc_values && f->parent == NULL);
	f = fd(m, "title.raw");
	REQUIRE(f != NULL);
	CHECK(f->type == ST_FT_KEYWORD && f->ignore_above == 10 && f->parent &&
	      strcmp(f->parent, "title") == 0);
	CHECK(fd(m, "tag")->doc_values == false && fd(m, "tag")->index);
	CHECK(fd(m, "n")->type == ST_FT_INTEGER && !fd(m, "n")->index);
	CHECK(strcmp(fd(m, "when")->format, "yyyy/MM/dd||epoch_millis") == 0);
	CHECK(fd(m, "user")->type == ST_FT_OBJECT && fd(m, "user")->dynamic == ST_DYNAMIC_TRUE);
	CHECK(fd(m, "user.name")->search_analyzer == ST_AN_SIMPLE &&
	      fd(m, "user.name")->analyzer == ST_AN_STANDARD);
	CHECK(fd(m, "a")->type == ST_FT_OBJECT && fd(m, "a.b")->type == ST_FT_OBJECT);
	CHECK(fd(m, "a")->dynamic == ST_DYNAMIC_STRICT); /* inherited from the root */
	CHECK(fd(m, "a.b.c")->type == ST_FT_BOOLEAN);
	CHECK(fd(m, "nope") == NULL && fd(m, "titl") == NULL && fd(m, "title.ra") == NULL);
	/* sorted by path */
	for (size_t i = 1; i < m->nfields; i++)
		CHECK(strcmp(m->fields[i - 1].path, m->fields[i].path) < 0);

	/* render, parse the rendering, render again: identical */
	char *r1 = render(m);
	st_mapping *m2 = mapping_of(r1, &err);
	REQUIRE(m2 != NULL);
	char *r2 = render(m2);
	CHECKF(strcmp(r1, r2) == 0, "%s\n%s", r1, r2);
	CHECK(m2->nfields == m->nfields);
	CHECK(strstr(r1, "\"dynamic\":\"strict\"") != NULL);
	CHECK(strstr(r1, "\"a\":{\"properties\":{\"b\":{\"properties\":{\"c\":{\"type\":"
	                 "\"boolean\"}}}}}") != NULL);
	CHECK(strstr(r1,
	             "\"title\":{\"type\":\"text\",\"analyzer\":\"english\",\"fields\":{\"raw\":"
	             "{\"type\":\"keyword\",\"ignore_above\":10}}}") != NULL);
	free(r1);
	free(r2);
	st_mapping_unref(m2);

	/* empty mapping renders as {} */
	st_mapping *e = st_mapping_new();
	char *re = render(e);
	CHECK(strcmp(re, "{}") == 0);
	free(re);
	st_mapping_unref(e);

	/* refcounts */
	CHECK(st_mapping_ref(m) == m && m->refs == 2);
	st_mapping_unref(m);
	st_mapping_unref(m);
}

static void
expect_mapping_error(const char *json, cm_err code, const char *reason_part)
{
	cm_error err;
	st_mapping *m = mapping_of(json, &err);
	CHECKF(m == NULL, "%s parsed", json);
	CHECKF(err.code == code, "%s: code %s", json, cm_err_name(err.code));
	CHECKF(strstr(err.reason, reason_part) != NULL, "%s: reason [%s]", json, err.reason);
	st_mapping_unref(m);
}

static void
test_mapping_errors(void)
{
	expect_mapping_error("{\"properties\":{\"f\":{\"type\":\"strng\"}}}", CM_EMAPPING,
	                     "No handler for type [strng] declared on field [f]");
	expect_mapping_error("{\"properties\":{\"o\":{\"properties\":{\"g\":{\"type\":\"x\"}}}}}",
	                     CM_EMAPPING, "No handler for type [x] declared on field [o.g]");
	expect_mapping_error(
	    "{\"properties\":{\"f\":{\"type\":\"text\",\"analyzer\":\"klingon\"}}}", CM_EMAPPING,
	    "analyzer [klingon] has not been configured");
	expect_mapping_error("{\"properties\":{\"f\":{\"type\":\"long\",\"analyzer\":\"simple\"}}}",
	                     CM_EMAPPING,
	                     "unknown parameter [analyzer] on mapper [f] of type [long]");
	expect_mapping_error("{\"properties\":{\"f\":{\"analyzer\":\"simple\"}}}", CM_EMAPPING,
	                     "No type specified for field [f]");
	expect_mapping_error("{\"properties\":{\"f\":{\"type\":\"date\",\"format\":\"yyyy-QQ\"}}}",
	                     CM_EMAPPING, "Invalid format");
	expect_mapping_error("{\"properties\":{\"f\":{\"type\":\"keyword\",\"ignore_above\":-1}}}",
	                     CM_EMAPPING, "must be positive");
	expect_mapping_error("{\"properties\":{\"f\":{\"type\":\"text\",\"fields\":{\"a.b\":{"
	                     "\"type\":\"keyword\"}}}}}",
	                     CM_EMAPPING, "cannot contain '.'");
	expect_mapping_error("{\"properties\":{\"f\":{\"type\":\"text\",\"fields\":{\"o\":{"
	                     "\"type\":\"object\"}}}}}",
	                     CM_EMAPPING, "cannot be used in multi field");
	/* ES: an IllegalArgumentException, not a mapper parsing error */
	expect_mapping_error("{\"properties\":{\"\":{\"type\":\"long\"}}}", CM_EINVAL,
	                     "empty string");
	expect_mapping_error("{\"_doc\":{\"properties\":{}}}", CM_EMAPPING,
	                     "Root mapping definition has unsupported parameters");
	expect_mapping_error("{\"dynamic\":\"sometimes\"}", CM_EMAPPING, "dynamic");
	expect_mapping_error("[1]", CM_EMAPPING, "mappings must be an object");
	expect_mapping_error("{\"properties\":{\"f\":\"long\"}}", CM_EMAPPING, "Expected map");
	/* depth limit (20) */
	char deep[2048] = "{\"properties\":";
	for (int i = 0; i < 22; i++)
		strcat(deep, "{\"o\":{\"properties\":");
	strcat(deep, "{\"x\":{\"type\":\"long\"}}");
	for (int i = 0; i < 22; i++)
		strcat(deep, "}}");
	strcat(deep, "}");
	expect_mapping_error(deep, CM_EINVAL, "Limit of mapping depth [20]");
	/* the hard total fields limit (10000; the index's own is below it) */
	size_t cap = 64 * 10100;
	char *big = malloc(cap);
	size_t n = (size_t)snprintf(big, cap, "{\"properties\":{");
	for (int i = 0; i < 10001; i++)
		n += (size_t)snprintf(big + n, cap - n, "%s\"f%d\":{\"type\":\"long\"}",
		                      i ? "," : "", i);
	snprintf(big + n, cap - n, "}}");
	expect_mapping_error(big, CM_EINVAL, "Limit of total fields [10000] has been exceeded");
	free(big);
	/* accepted compatibility parameters */
	cm_error err;
	st_mapping *m =
	    mapping_of("{\"_source\":{\"enabled\":true},\"properties\":{\"f\":{\"type\":"
	               "\"text\",\"norms\":false,\"store\":true}}}",
	               &err);
	CHECK(m != NULL);
	st_mapping_unref(m);
	m = mapping_of("{\"dynamic\":\"false\",\"properties\":{\"o\":{\"type\":\"object\","
	               "\"dynamic\":\"strict\"}}}",
	               &err);
	REQUIRE(m != NULL);
	CHECK(m->dynamic == ST_DYNAMIC_FALSE && fd(m, "o")->dynamic == ST_DYNAMIC_STRICT);
	st_mapping_unref(m);
}

static void
test_merge(void)
{
	cm_error err;
	st_mapping *base = mapping_of(full_mapping, &err);
	REQUIRE(base != NULL);
	base->version = 7;
	st_mapping *out = NULL;

	/* adding fields, including under an existing object and a new multi-field */
	st_mapping *add = mapping_of("{\"properties\":{\"user\":{\"properties\":{\"email\":{"
	                             "\"type\":\"keyword\"}}},\"tag\":{\"type\":\"keyword\","
	                             "\"doc_values\":false,\"fields\":{\"t\":{\"type\":\"text\"}}},"
	                             "\"new\":{\"type\":\"long\"}}}",
	                             &err);
	REQUIRE(add != NULL);
	cm_error_clear(&err);
	CHECK(st_mapping_merge(base, add, &out, &err) == CM_OK);
	REQUIRE(out != NULL);
	CHECK(out->version == 8);
	CHECK(out->dynamic == ST_DYNAMIC_STRICT); /* not given in add: kept */
	CHECK(fd(out, "user.email") && fd(out, "user.email")->type == ST_FT_KEYWORD);
	CHECK(fd(out, "tag.t") && strcmp(fd(out, "tag.t")->parent, "tag") == 0);
	CHECK(fd(out, "new") && fd(out, "title.raw") && fd(out, "user.name"));
	CHECK(out->nfields == base->nfields + 3);
	/* merging the same again changes nothing */
	st_mapping *out2 = NULL;
	CHECK(st_mapping_merge(out, add, &out2, &err) == CM_OK);
	CHECK(out2 && out2->version == out->version && out2->nfields == out->nfields);
	st_mapping_unref(out2);
	st_mapping_unref(out);
	st_mapping_unref(add);

	/* type conflict, ES's message */
	add = mapping_of("{\"properties\":{\"n\":{\"type\":\"text\"}}}", &err);
	cm_error_clear(&err);
	out = NULL;
	CHECK(st_mapping_merge(base, add, &out, &err) == CM_EINVAL && out == NULL);
	CHECKF(strcmp(err.reason, "mapper [n] cannot be changed from type [integer] to [text]") ==
	           0,
	       "%s", err.reason);
	st_mapping_unref(add);
	/* analyzer conflict */
	add = mapping_of("{\"properties\":{\"title\":{\"type\":\"text\"}}}", &err);
	cm_error_clear(&err);
	CHECK(st_mapping_merge(base, add, &out, &err) == CM_EINVAL);
	CHECK(
	    strstr(err.reason, "Cannot update parameter [analyzer] from [english] to [standard]"));
	st_mapping_unref(add);
	/* object vs concrete */
	add = mapping_of("{\"properties\":{\"user\":{\"type\":\"keyword\"}}}", &err);
	cm_error_clear(&err);
	CHECK(st_mapping_merge(base, add, &out, &err) == CM_EINVAL);
	CHECK(strstr(err.reason, "can't merge a non object mapping [user]"));
	st_mapping_unref(add);
	/* a field below a concrete one */
	add = mapping_of("{\"properties\":{\"n.x\":{\"type\":\"keyword\"}}}", &err);
	cm_error_clear(&err);
	CHECK(st_mapping_merge(base, add, &out, &err) == CM_EINVAL);
	st_mapping_unref(add);
	/* updatable: ignore_above, search_analyzer, dynamic */
	add = mapping_of("{\"dynamic\":false,\"properties\":{\"title\":{\"type\":\"text\","
	                 "\"analyzer\":\"english\",\"search_analyzer\":\"standard\",\"fields\":{"
	                 "\"raw\":{\"type\":\"keyword\",\"ignore_above\":20}}}}}",
	                 &err);
	cm_error_clear(&err);
	CHECK(st_mapping_merge(base, add, &out, &err) == CM_OK);
	REQUIRE(out != NULL);
	CHECK(out->dynamic == ST_DYNAMIC_FALSE && fd(out, "a")->dynamic == ST_DYNAMIC_FALSE);
	CHECK(fd(out, "user")->dynamic == ST_DYNAMIC_TRUE); /* explicit: kept */
	CHECK(fd(out, "title")->search_analyzer == ST_AN_STANDARD);
	CHECK(fd(out, "title.raw")->ignore_above == 20);
	CHECK(out->version == 8);
	st_mapping_unref(out);
	st_mapping_unref(add);
	/* merge with an empty addition */
	add = st_mapping_new();
	CHECK(st_mapping_merge(base, add, &out, &err) == CM_OK && out->nfields == base->nfields &&
	      out->version == 7);
	st_mapping_unref(out);
	st_mapping_unref(add);
	st_mapping_unref(base);
}

/* Parses src under *m, merging dynamic additions and parsing again, the way
 * the shard does it. */
static cm_err
parse_dyn(st_mapping **m, const char *src, st_doc *d, cm_error *err)
{
	for (int attempt = 0; attempt < 3; attempt++) {
		st_mapping *add = NULL;
		cm_error_clear(err);
		cm_err e = st_doc_parse(*m, "1", 1, src, strlen(src), d, &add, err);
		if (e != CM_OK) {
			st_mapping_unref(add);
			return e;
		}
		if (add == NULL)
			return CM_OK;
		st_doc_free(d);
		st_mapping *merged = NULL;
		e = st_mapping_merge(*m, add, &merged, err);
		st_mapping_unref(add);
		if (e != CM_OK)
			return e;
		st_mapping_unref(*m);
		*m = merged;
	}
	return CM_EINTERNAL;
}

static char *
read_first_line(const char *path)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return NULL;
	size_t cap = 1 << 16;
	char *line = malloc(cap);
	if (fgets(line, (int)cap, f) == NULL) {
		free(line);
		line = NULL;
	}
	fclose(f);
	return line;
}

static void
test_dynamic_sample(void)
{
	char *line = read_first_line(SAMPLE_DIR "/accounts-es.ndjson");
	if (line == NULL)
		line = read_first_line("../cluster-scripts/sample/accounts-es.ndjson");
	REQUIRE(line != NULL);
	st_mapping *m = st_mapping_new();
	st_doc d;
	cm_error err;
	char buf[1024];
	CHECKF(parse_dyn(&m, line, &d, &err) == CM_OK, "%s", err.reason);
	const st_field_def *f = fd(m, "name.firstName");
	REQUIRE(f != NULL);
	CHECK(f->type == ST_FT_TEXT && f->analyzer == ST_AN_STANDARD);
	f = fd(m, "name.firstName.keyword");
	REQUIRE(f != NULL);
	CHECK(f->type == ST_FT_KEYWORD && f->ignore_above == 256 &&
	      strcmp(f->parent, "name.firstName") == 0);
	CHECK(fd(m, "name")->type == ST_FT_OBJECT);
	{
		const char *bad = "{\"name.firstName.keyword\":\"x\"}";
		st_doc d2;
		st_mapping *add = NULL;
		cm_error_clear(&err);
		CHECK(st_doc_parse(m, "1", 1, bad, strlen(bad), &d2, &add, &err) == CM_EMAPPING);
		CHECKF(strstr(err.reason, "Existing mapping for [name.firstName] must be of type "
		                          "object but found [text]") != NULL,
		       "%s", err.reason);
		st_doc_free(&d2);
		/* a dotted key reaches the same field as the object form */
		const char *dotted = "{\"name.lastName\":\"Smith\",\"checkin.lat\":\"1.5\"}";
		cm_error_clear(&err);
		CHECK(st_doc_parse(m, "2", 1, dotted, strlen(dotted), &d2, &add, &err) == CM_OK);
		CHECK(add == NULL);
		CHECK(strcmp(vals(&d2, "name.lastName.keyword", buf, sizeof(buf)), "Smith") == 0);
		CHECK(strcmp(vals(&d2, "checkin.lat", buf, sizeof(buf)), "1.5") == 0);
		st_doc_free(&d2);
	}
	CHECK(fd(m, "age")->type == ST_FT_LONG);
	CHECK(fd(m, "balance")->type == ST_FT_FLOAT);
	CHECK(fd(m, "checkin")->type == ST_FT_OBJECT);
	CHECK(fd(m, "checkin.lat")->type == ST_FT_FLOAT);
	CHECK(fd(m, "contact.postcode")->type == ST_FT_TEXT); /* numeric strings stay text */
	CHECK(fd(m, "style.clothing.pants.keyword") != NULL);
	CHECK(m->version == 1);
	CHECK(strcmp(vals(&d, "name.firstName", buf, sizeof(buf)), "Michael") == 0);
	CHECK(strcmp(vals(&d, "name.firstName.keyword", buf, sizeof(buf)), "Michael") == 0);
	CHECK(strcmp(vals(&d, "age", buf, sizeof(buf)), "24") == 0);
	CHECK(strcmp(vals(&d, "balance", buf, sizeof(buf)), "221.46") == 0);
	/* personality is long: its keyword sub-field ignores it (ignore_above 256) */
	CHECK(strlen(vals(&d, "personality", buf, sizeof(buf))) > 256);
	CHECK(strcmp(vals(&d, "personality.keyword", buf, sizeof(buf)), "") == 0);
	/* every value's field belongs to the mapping */
	for (size_t i = 0; i < d.nvalues; i++)
		CHECK(d.values[i].field >= m->fields && d.values[i].field < m->fields + m->nfields);
	st_doc_free(&d);
	/* rendering shows ES's dynamic shape */
	char *r = render(m);
	CHECK(strstr(r, "\"firstName\":{\"type\":\"text\",\"fields\":{\"keyword\":{\"type\":"
	                "\"keyword\",\"ignore_above\":256}}}") != NULL);
	free(r);
	free(line);
	st_mapping_unref(m);
}

static void
test_dynamic_kinds(void)
{
	st_mapping *m = st_mapping_new();
	st_doc d;
	cm_error err;
	char buf[1024];
	const char *src = "{\"when\":\"2024-01-31T10:00:00Z\",\"year\":\"2015\",\"ok\":true,"
	                  "\"tags\":[\"a\",\"b\",null,\"c\"],\"empty\":[],\"nothing\":null,"
	                  "\"pts\":[{\"x\":1},{\"x\":2,\"y\":2.5}],\"a.b\":{\"c\":\"d\"},"
	                  "\"nested\":[[1,2],[3]],\"one\":1.0,\"exp\":1e3,\"big\":9007199254740993,"
	                  "\"slash\":\"2015/09/02\",\"digits\":\"12345678901\"}";
	CHECKF(parse_dyn(&m, src, &d, &err) == CM_OK, "%s", err.reason);
	CHECK(fd(m, "when") && fd(m, "when")->type == ST_FT_DATE);
	CHECK(fd(m, "year") && fd(m, "year")->type == ST_FT_TEXT);
	CHECK(fd(m, "slash") && fd(m, "slash")->type == ST_FT_DATE &&
	      strcmp(fd(m, "slash")->format, "yyyy/MM/dd HH:mm:ss||yyyy/MM/dd||epoch_millis") == 0);
	CHECK(strcmp(vals(&d, "slash", buf, sizeof(buf)), "1441152000000") == 0);
	CHECK(fd(m, "digits") && fd(m, "digits")->type == ST_FT_TEXT);
	CHECK(fd(m, "one") && fd(m, "one")->type == ST_FT_FLOAT); /* 1.0 */
	CHECK(fd(m, "exp") && fd(m, "exp")->type == ST_FT_FLOAT); /* 1e3 */
	CHECK(fd(m, "big") && fd(m, "big")->type == ST_FT_LONG);
	CHECK(strcmp(vals(&d, "big", buf, sizeof(buf)), "9007199254740993") == 0);
	CHECK(strcmp(vals(&d, "one", buf, sizeof(buf)), "1") == 0);
	CHECK(fd(m, "ok") && fd(m, "ok")->type == ST_FT_BOOLEAN);
	CHECK(fd(m, "empty") == NULL && fd(m, "nothing") == NULL);
	CHECK(fd(m, "pts.x")->type == ST_FT_LONG && fd(m, "pts.y")->type == ST_FT_FLOAT);
	CHECK(fd(m, "a")->type == ST_FT_OBJECT && fd(m, "a.b")->type == ST_FT_OBJECT &&
	      fd(m, "a.b.c")->type == ST_FT_TEXT);
	CHECK(strcmp(vals(&d, "when", buf, sizeof(buf)), "1706695200000") == 0);
	CHECK(strcmp(vals(&d, "tags", buf, sizeof(buf)), "a|b|c") == 0);
	CHECK(strcmp(vals(&d, "tags.keyword", buf, sizeof(buf)), "a|b|c") == 0);
	CHECK(strcmp(vals(&d, "pts.x", buf, sizeof(buf)), "1|2") == 0);
	CHECK(strcmp(vals(&d, "nested", buf, sizeof(buf)), "1|2|3") == 0);
	CHECK(strcmp(vals(&d, "a.b.c", buf, sizeof(buf)), "d") == 0);
	CHECK(strcmp(vals(&d, "ok", buf, sizeof(buf)), "1") == 0);
	/* ordinals count each field's values */
	for (size_t i = 0, k = 0; i < d.nvalues; i++)
		if (strcmp(d.values[i].field->path, "tags") == 0)
			CHECK(d.values[i].ordinal == k++);
	st_doc_free(&d);
	/* a later document with a new type for an existing field: coerced or refused */
	CHECK(parse_dyn(&m, "{\"pts\":{\"x\":\"7\"}}", &d, &err) == CM_OK);
	CHECK(strcmp(vals(&d, "pts.x", buf, sizeof(buf)), "7") == 0);
	st_doc_free(&d);
	CHECK(parse_dyn(&m, "{\"ok\":\"yes\"}", &d, &err) == CM_EMAPPING);
	CHECK(strstr(err.reason, "failed to parse field [ok] of type [boolean]") != NULL);
	st_doc_free(&d);
	/* mixed array: first element decides (long), the string then fails */
	CHECK(parse_dyn(&m, "{\"mix\":[1,\"x\"]}", &d, &err) == CM_EMAPPING);
	CHECK(fd(m, "mix") && fd(m, "mix")->type == ST_FT_LONG);
	st_doc_free(&d);
	st_mapping_unref(m);
}

static void
test_strict_and_false(void)
{
	cm_error err;
	st_mapping *m =
	    mapping_of("{\"dynamic\":\"strict\",\"properties\":{\"a\":{\"type\":\"long\"},"
	               "\"o\":{\"dynamic\":false,\"properties\":{\"k\":{\"type\":"
	               "\"keyword\"}}},\"s\":{\"properties\":{}}}}",
	               &err);
	REQUIRE(m != NULL);
	st_doc d;
	st_mapping *add = NULL;
	const char *src = "{\"a\":1,\"b\":2}";
	cm_error_clear(&err);
	CHECK(st_doc_parse(m, "1", 1, src, strlen(src), &d, &add, &err) == CM_EMAPPING);
	CHECK(add == NULL);
	CHECK(strcmp(cm_error_type(&err), "strict_dynamic_mapping_exception") == 0);
	CHECKF(strcmp(err.reason,
	              "mapping set to strict, dynamic introduction of [b] within [_doc] "
	              "is not allowed") == 0,
	       "%s", err.reason);
	st_doc_free(&d);
	/* strict inherited by s */
	src = "{\"s\":{\"z\":1}}";
	cm_error_clear(&err);
	CHECK(st_doc_parse(m, "1", 1, src, strlen(src), &d, &add, &err) == CM_EMAPPING);
	CHECK(strstr(err.reason, "introduction of [z] within [s]") != NULL);
	st_doc_free(&d);
	/* dynamic false below o: unknown fields kept in _source only */
	src = "{\"a\":5,\"o\":{\"k\":\"v\",\"extra\":{\"deep\":1},\"more\":\"x\"}}";
	cm_error_clear(&err);
	CHECK(st_doc_parse(m, "1", 1, src, strlen(src), &d, &add, &err) == CM_OK);
	CHECK(add == NULL && d.nvalues == 2);
	CHECK(d.source == src && d.source_len == strlen(src));
	st_doc_free(&d);
	st_mapping_unref(m);

	/* root dynamic false */
	m = mapping_of("{\"dynamic\":false}", &err);
	src = "{\"x\":1,\"y\":{\"z\":\"w\"}}";
	CHECK(st_doc_parse(m, "1", 1, src, strlen(src), &d, &add, &err) == CM_OK);
	CHECK(add == NULL && d.nvalues == 0);
	st_doc_free(&d);
	st_mapping_unref(m);
}

static void
test_null_malformed_coerce(void)
{
	cm_error err;
	st_mapping *m = mapping_of(
	    "{\"properties\":{\"k\":{\"type\":\"keyword\",\"null_value\":\"NULL\",\"fields\":{"
	    "\"t\":{\"type\":\"text\"}}},\"n\":{\"type\":\"long\",\"null_value\":-1,"
	    "\"ignore_malformed\":true},\"c\":{\"type\":\"integer\",\"coerce\":false},"
	    "\"d\":{\"type\":\"date\",\"ignore_malformed\":\"true\",\"null_value\":"
	    "\"2024-01-31\"},\"f\":{\"type\":\"float\",\"null_value\":0.1}}}",
	    &err);
	REQUIRE(m != NULL);
	CHECK(strcmp(fd(m, "k")->null_value, "NULL") == 0 &&
	      strcmp(fd(m, "n")->null_value, "-1") == 0);
	CHECK(strcmp(fd(m, "f")->null_value, "0.1") == 0);
	CHECK(fd(m, "n")->ignore_malformed && fd(m, "c")->no_coerce && !fd(m, "n")->no_coerce);
	char *r = render(m);
	st_mapping *m2 = mapping_of(r, &err);
	REQUIRE(m2 != NULL);
	char *r2 = render(m2);
	CHECK(strcmp(r, r2) == 0);
	CHECK(strstr(r, "\"coerce\":false") && strstr(r, "\"null_value\":\"-1\""));
	free(r);
	free(r2);
	st_mapping_unref(m2);

	st_doc d;
	st_mapping *add = NULL;
	char buf[256];
	const char *src =
	    "{\"k\":[null,\"x\"],\"n\":[null,\"oops\",7,{\"a\":1}],\"c\":5,\"d\":[\"bad\","
	    "null],\"f\":null}";
	cm_error_clear(&err);
	CHECKF(st_doc_parse(m, "1", 1, src, strlen(src), &d, &add, &err) == CM_OK, "%s",
	       err.reason);
	CHECK(strcmp(vals(&d, "k", buf, sizeof(buf)), "NULL|x") == 0);
	CHECK(strcmp(vals(&d, "k.t", buf, sizeof(buf)), "NULL|x") == 0);
	CHECK(strcmp(vals(&d, "n", buf, sizeof(buf)), "-1|7") == 0);
	CHECK(strcmp(vals(&d, "d", buf, sizeof(buf)), "1706659200000") == 0);
	CHECK(strcmp(vals(&d, "f", buf, sizeof(buf)), "0.1") == 0);
	st_doc_free(&d);
	const char *refused[] = {"{\"c\":\"5\"}", "{\"c\":5.5}"};
	for (int i = 0; i < 2; i++) {
		cm_error_clear(&err);
		CHECK(st_doc_parse(m, "1", 1, refused[i], strlen(refused[i]), &d, &add, &err) ==
		      CM_EMAPPING);
		CHECK(strstr(err.reason, "failed to parse field [c] of type [integer]") != NULL);
		st_doc_free(&d);
	}
	/* null_value cannot change; coerce and ignore_malformed can */
	st_mapping *chg = mapping_of("{\"properties\":{\"k\":{\"type\":\"keyword\",\"null_value\":"
	                             "\"N\"}}}",
	                             &err);
	st_mapping *out = NULL;
	cm_error_clear(&err);
	CHECK(st_mapping_merge(m, chg, &out, &err) == CM_EINVAL);
	CHECK(strstr(err.reason, "Cannot update parameter [null_value] from [NULL] to [N]") !=
	      NULL);
	st_mapping_unref(chg);
	chg = mapping_of("{\"properties\":{\"c\":{\"type\":\"integer\"}}}", &err);
	cm_error_clear(&err);
	CHECK(st_mapping_merge(m, chg, &out, &err) == CM_OK && !fd(out, "c")->no_coerce);
	st_mapping_unref(out);
	st_mapping_unref(chg);
	st_mapping_unref(m);

	expect_mapping_error("{\"properties\":{\"n\":{\"type\":\"long\",\"null_value\":\"abc\"}}}",
	                     CM_EMAPPING, "Error parsing [null_value] on field [n]");
	expect_mapping_error("{\"properties\":{\"t\":{\"type\":\"text\",\"null_value\":\"x\"}}}",
	                     CM_EMAPPING, "unknown parameter [null_value]");
	expect_mapping_error("{\"properties\":{\"k\":{\"type\":\"keyword\",\"coerce\":true}}}",
	                     CM_EMAPPING, "unknown parameter [coerce]");
}

static void
test_copy_to_enabled(void)
{
	cm_error err;
	st_mapping *m = mapping_of(
	    "{\"properties\":{\"first\":{\"type\":\"text\",\"copy_to\":\"all\"},\"last\":{\"type\":"
	    "\"keyword\",\"copy_to\":[\"all\",\"extra.names\"]},\"all\":{\"type\":\"text\","
	    "\"fields\":"
	    "{\"kw\":{\"type\":\"keyword\"}}},\"blob\":{\"type\":\"object\",\"enabled\":false},"
	    "\"o\":{\"properties\":{\"x\":{\"type\":\"long\"}}},\"bad\":{\"type\":\"long\","
	    "\"copy_to\":\"o\"}}}",
	    &err);
	REQUIRE(m != NULL);
	CHECK(fd(m, "last")->ncopy_to == 2 &&
	      strcmp(fd(m, "last")->copy_to[1], "extra.names") == 0);
	CHECK(fd(m, "blob")->disabled && !fd(m, "o")->disabled);
	char *r = render(m);
	CHECK(strstr(r, "\"copy_to\":[\"all\",\"extra.names\"]") != NULL);
	CHECK(strstr(r, "\"blob\":{\"type\":\"object\",\"enabled\":false}") != NULL);
	st_mapping *m2 = mapping_of(r, &err);
	REQUIRE(m2 != NULL);
	char *r2 = render(m2);
	CHECK(strcmp(r, r2) == 0);
	free(r);
	free(r2);
	st_mapping_unref(m2);

	st_doc d;
	char buf[256];
	const char *src = "{\"first\":\"John\",\"last\":[\"Smith\",\"Jones\"],\"blob\":{\"any\":[1,"
	                  "{\"x\":\"y\"}],\"n\":null}}";
	CHECKF(parse_dyn(&m, src, &d, &err) == CM_OK, "%s", err.reason);
	CHECK(strcmp(vals(&d, "all", buf, sizeof(buf)), "John|Smith|Jones") == 0);
	CHECK(strcmp(vals(&d, "all.kw", buf, sizeof(buf)), "John|Smith|Jones") == 0);
	/* the missing target was mapped dynamically (text + keyword) */
	CHECK(fd(m, "extra") && fd(m, "extra")->type == ST_FT_OBJECT);
	CHECK(fd(m, "extra.names") && fd(m, "extra.names")->type == ST_FT_TEXT);
	CHECK(strcmp(vals(&d, "extra.names", buf, sizeof(buf)), "Smith|Jones") == 0);
	CHECK(fd(m, "blob.any") == NULL);
	size_t nblob = 0;
	for (size_t i = 0; i < d.nvalues; i++)
		nblob += strncmp(d.values[i].field->path, "blob", 4) == 0;
	CHECK(nblob == 0);
	st_doc_free(&d);
	/* a disabled object takes even a scalar */
	CHECK(parse_dyn(&m, "{\"blob\":5}", &d, &err) == CM_OK && d.nvalues == 0);
	st_doc_free(&d);
	CHECK(parse_dyn(&m, "{\"bad\":5}", &d, &err) == CM_EMAPPING);
	CHECK(strstr(err.reason, "Cannot copy to field [o] since it is mapped as an object") !=
	      NULL);
	st_doc_free(&d);
	/* enabled cannot change; copy_to can */
	st_mapping *chg = mapping_of("{\"properties\":{\"blob\":{\"properties\":{}}}}", &err);
	st_mapping *out = NULL;
	cm_error_clear(&err);
	CHECK(st_mapping_merge(m, chg, &out, &err) == CM_EINVAL);
	CHECK(strstr(err.reason, "Cannot update parameter [enabled]") != NULL);
	st_mapping_unref(chg);
	chg = mapping_of("{\"properties\":{\"first\":{\"type\":\"text\"}}}", &err);
	cm_error_clear(&err);
	CHECK(st_mapping_merge(m, chg, &out, &err) == CM_OK && fd(out, "first")->ncopy_to == 0);
	CHECK(out->version == m->version + 1);
	st_mapping_unref(out);
	st_mapping_unref(chg);
	st_mapping_unref(m);
	expect_mapping_error(
	    "{\"properties\":{\"t\":{\"type\":\"text\",\"fields\":{\"k\":{\"type\":"
	    "\"keyword\",\"copy_to\":\"x\"}}}}}",
	    CM_EMAPPING, "may not be used to copy from a multi-field");
	expect_mapping_error("{\"properties\":{\"t\":{\"type\":\"text\",\"copy_to\":5}}}",
	                     CM_EMAPPING, "invalid value for [copy_to]");
}

static void
test_detection_settings(void)
{
	cm_error err;
	st_mapping *m = mapping_of("{\"date_detection\":false,\"numeric_detection\":true}", &err);
	REQUIRE(m != NULL);
	CHECK(m->date_detection == -1 && m->numeric_detection == 1);
	char *r = render(m);
	CHECK(strcmp(r, "{\"date_detection\":false,\"numeric_detection\":true}") == 0);
	free(r);
	st_doc d;
	CHECK(parse_dyn(&m, "{\"a\":\"2024-01-31\",\"b\":\"42\",\"c\":\"4.5\",\"e\":\"x1\"}", &d,
	                &err) == CM_OK);
	CHECK(fd(m, "a")->type == ST_FT_TEXT && fd(m, "b")->type == ST_FT_LONG &&
	      fd(m, "c")->type == ST_FT_FLOAT && fd(m, "e")->type == ST_FT_TEXT);
	CHECK(m->date_detection == -1); /* kept through the dynamic merge */
	st_doc_free(&d);
	/* a later PUT without the settings keeps them; one with them changes them */
	st_mapping *add = mapping_of("{\"date_detection\":true}", &err), *out = NULL;
	cm_error_clear(&err);
	CHECK(st_mapping_merge(m, add, &out, &err) == CM_OK && out->date_detection == 1 &&
	      out->numeric_detection == 1 && out->version == m->version + 1);
	st_mapping_unref(out);
	st_mapping_unref(add);
	st_mapping_unref(m);
	expect_mapping_error("{\"date_detection\":\"maybe\"}", CM_EMAPPING,
	                     "invalid value for [date_detection]");
}

static void
test_coercion_and_errors(void)
{
	cm_error err;
	st_mapping *m = mapping_of(
	    "{\"properties\":{\"l\":{\"type\":\"long\"},\"i\":{\"type\":\"integer\"},\"b\":{"
	    "\"type\":\"byte\"},\"f\":{\"type\":\"float\"},\"dbl\":{\"type\":\"double\"},\"k\":{"
	    "\"type\":\"keyword\",\"ignore_above\":3},\"t\":{\"type\":\"text\"},\"bo\":{\"type\":"
	    "\"boolean\"},\"d\":{\"type\":\"date\",\"format\":\"yyyy/MM/dd||epoch_millis\"},"
	    "\"o\":{\"properties\":{\"x\":{\"type\":\"long\"}}}}}",
	    &err);
	REQUIRE(m != NULL);
	st_doc d;
	st_mapping *add = NULL;
	char buf[512];
	const char *src = "{\"l\":[\"5\",5.7,-5.7,\"9007199254740993\"],\"i\":\"-12\",\"b\":127,"
	                  "\"f\":\"1.5\",\"dbl\":2,\"k\":[\"abc\",\"abcd\",12,true],\"t\":3.25,"
	                  "\"bo\":[\"true\",false,\"\"],\"d\":[\"2024/01/31\",1706659200000]}";
	cm_error_clear(&err);
	CHECKF(st_doc_parse(m, "1", 1, src, strlen(src), &d, &add, &err) == CM_OK, "%s",
	       err.reason);
	CHECK(add == NULL);
	CHECK(strcmp(vals(&d, "l", buf, sizeof(buf)), "5|5|-5|9007199254740993") == 0);
	CHECK(strcmp(vals(&d, "i", buf, sizeof(buf)), "-12") == 0);
	CHECK(strcmp(vals(&d, "b", buf, sizeof(buf)), "127") == 0);
	CHECK(strcmp(vals(&d, "f", buf, sizeof(buf)), "1.5") == 0);
	CHECK(strcmp(vals(&d, "dbl", buf, sizeof(buf)), "2") == 0);
	CHECKF(strcmp(vals(&d, "k", buf, sizeof(buf)), "abc|12") == 0, "%s", buf);
	CHECK(strcmp(vals(&d, "t", buf, sizeof(buf)), "3.25") == 0);
	CHECK(strcmp(vals(&d, "bo", buf, sizeof(buf)), "1|0") == 0);
	CHECK(strcmp(vals(&d, "d", buf, sizeof(buf)), "1706659200000|1706659200000") == 0);
	st_doc_free(&d);

	/* numbers keep their written form: exact longs past 2^53, keyword text
	 * as sent, numbers inside strings do not confuse the pairing */
	src = "{\"k\":[\"x \\\"12\\\" -3\",1.0,-0.50e1],\"t\":\"9 9\",\"l\":[9007199254740993,"
	      "-9223372036854775808,1e2],\"o\":{\"x\":12345678901234567}}";
	cm_error_clear(&err);
	CHECKF(st_doc_parse(m, "1", 1, src, strlen(src), &d, &add, &err) == CM_OK, "%s",
	       err.reason);
	CHECKF(strcmp(vals(&d, "l", buf, sizeof(buf)),
	              "9007199254740993|-9223372036854775808|100") == 0,
	       "%s", buf);
	CHECK(strcmp(vals(&d, "o.x", buf, sizeof(buf)), "12345678901234567") == 0);
	CHECKF(strcmp(vals(&d, "k", buf, sizeof(buf)), "1.0") == 0, "%s",
	       buf); /* others > 3 chars */
	st_doc_free(&d);
	src = "{\"l\":9223372036854775808}";
	cm_error_clear(&err);
	CHECK(st_doc_parse(m, "1", 1, src, strlen(src), &d, &add, &err) == CM_EMAPPING);
	st_doc_free(&d);

	struct {
		const char *src, *reason;
	} bad[] = {
	    {"{\"l\":\"abc\"}", "failed to parse field [l] of type [long] in document with id '1'. "
	                        "Preview of field's value: 'abc'"},
	    {"{\"b\":128}", "failed to parse field [b] of type [byte]"},
	    {"{\"i\":3000000000}", "failed to parse field [i] of type [integer]"},
	    {"{\"l\":1e300}", "failed to parse field [l] of type [long]"},
	    {"{\"l\":true}", "failed to parse field [l] of type [long]"},
	    {"{\"f\":\"nan\"}", "failed to parse field [f] of type [float]"},
	    {"{\"f\":1e39}", "failed to parse field [f] of type [float]"},
	    {"{\"bo\":1}", "failed to parse field [bo] of type [boolean]"},
	    {"{\"d\":\"2024-01-31\"}", "failed to parse field [d] of type [date]"},
	    {"{\"k\":{\"x\":1}}", "failed to parse field [k] of type [keyword]"},
	    {"{\"o\":5}", "object mapping for [o] tried to parse field [o] as object, but found a "
	                  "concrete value"},
	    {"{\"_id\":\"x\"}", "Field [_id] is a metadata field"},
	    {"{\"l.x\":1}", "Could not dynamically add mapping for field [l.x]. Existing mapping "
	                    "for [l] must be of type object but found [long]."},
	    {"{\"t\":{\"y\":1}}", "failed to parse field [t] of type [text]"},
	    {"{\"\":1}", "field name cannot be an empty string"},
	    {"{\"a\":", "failed to parse"},
	    {"[1,2]", "failed to parse"},
	    {"\"str\"", "failed to parse"},
	    {"", "failed to parse"},
	    {"{\"a\":1} trailing", "failed to parse"},
	    {"{\"a\":1,\"b\":2,\"a\":3}", "Duplicate field 'a'"},
	    {"{\"o\":{\"x\":1,\"x\":1}}", "Duplicate field 'x'"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cm_error_clear(&err);
		add = NULL;
		cm_err e = st_doc_parse(m, "1", 1, bad[i].src, strlen(bad[i].src), &d, &add, &err);
		CHECKF(e == CM_EMAPPING, "%s: %s", bad[i].src, cm_err_name(e));
		CHECKF(strstr(err.reason, bad[i].reason) != NULL, "%s: [%s]", bad[i].src,
		       err.reason);
		CHECK(add == NULL);
		CHECK(strcmp(cm_error_type(&err), "mapper_parsing_exception") == 0);
		st_doc_free(&d);
		CHECK(d.values == NULL && d.json == NULL);
	}

	/* duplicates in a large object (hash path), and none */
	{
		char big[8192];
		size_t bn = (size_t)snprintf(big, sizeof(big), "{");
		for (int i = 0; i < 200; i++)
			bn += (size_t)snprintf(big + bn, sizeof(big) - bn, "%s\"f%d\":%d",
			                       i ? "," : "", i, i);
		snprintf(big + bn, sizeof(big) - bn, "}");
		st_mapping *bm = st_mapping_new();
		cm_error_clear(&err);
		CHECK(st_doc_parse(bm, "1", 1, big, strlen(big), &d, NULL, &err) == CM_OK);
		st_doc_free(&d);
		snprintf(big + bn, sizeof(big) - bn, ",\"f150\":1}");
		cm_error_clear(&err);
		CHECK(st_doc_parse(bm, "1", 1, big, strlen(big), &d, NULL, &err) == CM_EMAPPING);
		CHECK(strstr(err.reason, "Duplicate field 'f150'") != NULL);
		st_doc_free(&d);
		st_mapping_unref(bm);
	}
	/* nesting bound: 150 levels of objects, and of arrays */
	char deep[1024];
	size_t n = 0;
	for (int i = 0; i < 150; i++)
		n += (size_t)snprintf(deep + n, sizeof(deep) - n, "{\"a\":");
	n += (size_t)snprintf(deep + n, sizeof(deep) - n, "1");
	for (int i = 0; i < 150; i++)
		deep[n++] = '}';
	deep[n] = '\0';
	st_mapping *dm = st_mapping_new();
	cm_error_clear(&err);
	CHECK(st_doc_parse(dm, "1", 1, deep, n, &d, &add, &err) == CM_EMAPPING);
	st_doc_free(&d);
	n = (size_t)snprintf(deep, sizeof(deep), "{\"a\":");
	for (int i = 0; i < 150; i++)
		deep[n++] = '[';
	deep[n++] = '1';
	for (int i = 0; i < 150; i++)
		deep[n++] = ']';
	deep[n++] = '}';
	deep[n] = '\0';
	cm_error_clear(&err);
	CHECK(st_doc_parse(dm, "1", 1, deep, n, &d, &add, &err) == CM_EMAPPING);
	st_doc_free(&d);
	/* without dynamic_add, unknown fields are skipped */
	src = "{\"x\":1}";
	CHECK(st_doc_parse(dm, "1", 1, src, strlen(src), &d, NULL, &err) == CM_OK &&
	      d.nvalues == 0);
	st_doc_free(&d);
	st_mapping_unref(dm);
	st_mapping_unref(m);
}

static int
count_tok(void *ctx, const st_token *t)
{
	(*(size_t *)ctx)++;
	return 0;
}

/* Parse (and analyze) the sample's 1000 accounts a few times: a figure for
 * the report, not a pass/fail gate. */
static void
bench_sample(void)
{
	FILE *fp = fopen(SAMPLE_DIR "/accounts-es.ndjson", "r");
	if (fp == NULL)
		return;
	static char *lines[1000];
	size_t nlines = 0, bytes = 0;
	char buf[1 << 16];
	while (nlines < 1000 && fgets(buf, sizeof(buf), fp) != NULL) {
		lines[nlines++] = strdup(buf);
		bytes += strlen(buf);
	}
	fclose(fp);
	st_mapping *m = st_mapping_new();
	cm_error err;
	st_doc d;
	for (size_t i = 0; i < nlines; i++) {
		CHECK(parse_dyn(&m, lines[i], &d, &err) == CM_OK);
		st_doc_free(&d);
	}
	struct timespec a, b;
	size_t toks = 0;
	int rounds = 20;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
	for (int r = 0; r < rounds; r++) {
		for (size_t i = 0; i < nlines; i++) {
			st_mapping *add = NULL;
			cm_err e =
			    st_doc_parse(m, "1", 1, lines[i], strlen(lines[i]), &d, &add, &err);
			CHECK(e == CM_OK && add == NULL);
			for (size_t k = 0; k < d.nvalues; k++)
				if (d.values[k].field->type == ST_FT_TEXT)
					st_analyze(d.values[k].field->analyzer, d.values[k].s,
					           d.values[k].n, 0, count_tok, &toks, NULL);
			st_doc_free(&d);
		}
	}
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
	double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	printf(
	    "accounts sample: %.0f docs per CPU-second parsed+analyzed (%.1f MB/s, %zu fields)\n",
	    (double)nlines * rounds / s, (double)bytes * rounds / s / 1e6, m->nfields);
	st_mapping_unref(m);
	for (size_t i = 0; i < nlines; i++)
		free(lines[i]);
}

int
main(void)
{
	test_dates();
	test_mapping_parse_render();
	test_mapping_errors();
	test_merge();
	test_dynamic_sample();
	test_dynamic_kinds();
	test_strict_and_false();
	test_coercion_and_errors();
	test_null_malformed_coerce();
	test_copy_to_enabled();
	test_detection_settings();
	bench_sample();
	return check_report("mapping_test");
}
