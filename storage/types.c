/* Name tables for field types and analyzers, as Elasticsearch spells them. */
#include "st_types.h"

#include <string.h>

static const char *const field_type_names[] = {
    [ST_FT_TEXT] = "text",       [ST_FT_KEYWORD] = "keyword", [ST_FT_LONG] = "long",
    [ST_FT_INTEGER] = "integer", [ST_FT_SHORT] = "short",     [ST_FT_BYTE] = "byte",
    [ST_FT_DOUBLE] = "double",   [ST_FT_FLOAT] = "float",     [ST_FT_DATE] = "date",
    [ST_FT_BOOLEAN] = "boolean", [ST_FT_OBJECT] = "object",   [ST_FT_BINARY] = "binary",
};

static const char *const analyzer_names[] = {
    [ST_AN_STANDARD] = "standard", [ST_AN_SIMPLE] = "simple",   [ST_AN_WHITESPACE] = "whitespace",
    [ST_AN_KEYWORD] = "keyword",   [ST_AN_ENGLISH] = "english",
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

const char *
st_field_type_name(st_field_type t)
{
	if ((unsigned)t >= NELEM(field_type_names))
		return "unknown";
	return field_type_names[t];
}

bool
st_field_type_from_name(const char *name, st_field_type *out)
{
	if (name == NULL)
		return false;
	for (size_t i = 0; i < NELEM(field_type_names); i++) {
		if (strcmp(name, field_type_names[i]) == 0) {
			*out = (st_field_type)i;
			return true;
		}
	}
	return false;
}

bool
st_field_type_is_numeric(st_field_type t)
{
	switch (t) {
	case ST_FT_LONG:
	case ST_FT_INTEGER:
	case ST_FT_SHORT:
	case ST_FT_BYTE:
	case ST_FT_DOUBLE:
	case ST_FT_FLOAT:
	case ST_FT_DATE:
	case ST_FT_BOOLEAN:
		return true;
	default:
		return false;
	}
}

const char *
st_analyzer_name(st_analyzer_kind a)
{
	if ((unsigned)a >= NELEM(analyzer_names))
		return "unknown";
	return analyzer_names[a];
}

bool
st_analyzer_from_name(const char *name, st_analyzer_kind *out)
{
	if (name == NULL)
		return false;
	for (size_t i = 0; i < NELEM(analyzer_names); i++) {
		if (strcmp(name, analyzer_names[i]) == 0) {
			*out = (st_analyzer_kind)i;
			return true;
		}
	}
	return false;
}
