/* libFuzzer target: document parsing with dynamic mapping, mapping JSON,
 * analyzers and dates on arbitrary bytes. Build:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I. storage/docparse_fuzz.c \
 *     storage/{types,analysis,mapping,docparse,date}.c common/cm_alloc.c common/cm_err.c \
 *     -lcjson -lutf8proc -lstemmer -o docparse_fuzz
 * The first input byte picks the target. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "storage/st_types.h"

static int
count_tok(void *ctx, const st_token *t)
{
	size_t *n = ctx;
	/* touch the term so ASan sees out-of-bounds reads */
	for (size_t i = 0; i < t->len; i++)
		*n += (unsigned char)t->term[i];
	return 0;
}

/* A mapping with every feature, for documents to collide with. */
static const char *rich_mapping =
    "{\"properties\":{\"k\":{\"type\":\"keyword\",\"ignore_above\":5,\"null_value\":\"N\","
    "\"copy_to\":[\"all\",\"x.y\"]},\"all\":{\"type\":\"text\",\"analyzer\":\"english\","
    "\"fields\":{\"kw\":{\"type\":\"keyword\"}}},\"n\":{\"type\":\"byte\",\"coerce\":false},"
    "\"l\":{\"type\":\"long\",\"ignore_malformed\":true,\"copy_to\":\"all\"},\"d\":{\"type\":"
    "\"date\",\"format\":\"yyyy/MM/dd||epoch_second\"},\"b\":{\"type\":\"boolean\"},\"o\":{"
    "\"dynamic\":\"strict\",\"properties\":{\"f\":{\"type\":\"float\"}}},\"off\":{\"type\":"
    "\"object\",\"enabled\":false},\"q\":{\"dynamic\":false,\"properties\":{}}}}";

static st_mapping *
start_mapping(st_dynamic dyn, bool rich)
{
	st_mapping *m = NULL;
	if (rich) {
		cJSON *j = cJSON_Parse(rich_mapping);
		cm_error err;
		cm_error_clear(&err);
		if (j == NULL || st_mapping_from_json(j, &m, &err) != CM_OK)
			abort();
		cJSON_Delete(j);
	} else {
		m = st_mapping_new();
	}
	m->dynamic = dyn;
	return m;
}

static void
fuzz_doc(const char *s, size_t n, st_dynamic dyn, bool rich)
{
	st_mapping *m = start_mapping(dyn, rich);
	st_doc d;
	cm_error err;
	for (int attempt = 0; attempt < 3; attempt++) {
		st_mapping *add = NULL, *merged = NULL;
		cm_error_clear(&err);
		cm_err e = st_doc_parse(m, "id", 2, s, n, &d, &add, &err);
		if (e == CM_OK && add == NULL) {
			size_t sum = 0;
			for (size_t i = 0; i < d.nvalues; i++)
				if (d.values[i].field->type == ST_FT_TEXT)
					st_analyze(d.values[i].field->analyzer, d.values[i].s,
					           d.values[i].n, 0, count_tok, &sum, NULL);
			cJSON *r = st_mapping_to_json(m);
			cJSON_Delete(r);
		}
		st_doc_free(&d);
		if (e != CM_OK || add == NULL) {
			st_mapping_unref(add);
			break;
		}
		cm_error_clear(&err);
		e = st_mapping_merge(m, add, &merged, &err);
		st_mapping_unref(add);
		if (e != CM_OK)
			break;
		st_mapping_unref(m);
		m = merged;
	}
	st_mapping_unref(m);
}

static void
fuzz_mapping(const char *s, size_t n)
{
	cJSON *j = cJSON_ParseWithLength(s, n);
	if (j == NULL)
		return;
	st_mapping *m = NULL, *merged = NULL;
	cm_error err;
	cm_error_clear(&err);
	if (st_mapping_from_json(j, &m, &err) == CM_OK) {
		cJSON *r = st_mapping_to_json(m);
		st_mapping *m2 = NULL;
		cm_error_clear(&err);
		if (st_mapping_from_json(r, &m2, &err) != CM_OK || m2->nfields != m->nfields)
			abort(); /* a rendering must parse back to the same fields */
		cm_error_clear(&err);
		if (st_mapping_merge(m, m2, &merged, &err) != CM_OK)
			abort(); /* merging a mapping with itself never conflicts */
		st_mapping_unref(merged);
		st_mapping_unref(m2);
		cJSON_Delete(r);
		st_mapping_unref(m);
	}
	cJSON_Delete(j);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *s = (const char *)data + 1;
	size_t n = size - 1;
	switch (data[0] % 8) {
	case 0:
		fuzz_doc(s, n, ST_DYNAMIC_TRUE, false);
		break;
	case 1:
		fuzz_doc(s, n, ST_DYNAMIC_STRICT, false);
		break;
	case 6:
		fuzz_doc(s, n, ST_DYNAMIC_TRUE, true);
		break;
	case 7:
		fuzz_doc(s, n, ST_DYNAMIC_STRICT, true);
		break;
	case 2:
		fuzz_mapping(s, n);
		break;
	case 3: {
		size_t sum = 0;
		for (int a = ST_AN_STANDARD; a <= ST_AN_ENGLISH; a++)
			st_analyze((st_analyzer_kind)a, s, n, 0, count_tok, &sum, NULL);
		break;
	}
	case 4: {
		int64_t ms;
		char buf[48];
		/* four-digit years render back into the strict ISO form */
		if (st_date_parse(s, n, NULL, &ms) && ms >= -62167219200000LL &&
		    ms <= 253402300799999LL) {
			st_date_format(ms, buf, sizeof(buf));
			int64_t back;
			if (!st_date_parse(buf, strlen(buf), NULL, &back) || back != ms)
				abort(); /* rendering must parse back */
		}
		break;
	}
	case 5: {
		/* format in the first half, value in the second */
		size_t h = n / 2;
		char *fmt = malloc(h + 1);
		memcpy(fmt, s, h);
		fmt[h] = '\0';
		int64_t ms;
		if (st_date_format_valid(fmt))
			st_date_parse(s + h, n - h, fmt, &ms);
		free(fmt);
		break;
	}
	}
	return 0;
}
