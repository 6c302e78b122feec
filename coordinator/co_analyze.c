/* GET|POST /_analyze and /{index}/_analyze: runs an analyzer (a named
 * one, the index's custom ones, a field's, a normalizer, or a chain
 * given as tokenizer + filter + char_filter) over text and answers with
 * the tokens as ES does. Runs on the node that received the request:
 * every node holds every index's settings. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "co_private.h"

#define MAX_ANALYZE_TOKENS 10000 /* index.analyze.max_token_count's default */
#define VALUE_GAP 100            /* position_increment_gap between array values */

typedef struct acc {
	cJSON *tokens;
	uint32_t offset; /* of this value within the concatenated values */
	const char *text;
	uint32_t *u16;         /* UTF-16 offset of each byte offset: ES counts Java chars */
	st_analyzer_kind kind; /* built-in: types come from the source bytes */
	int count;
	long long max_tokens; /* index.analyze.max_token_count */
	bool too_many;
	bool explain; /* adds bytes, positionLength, termFrequency */
} acc;

static int
on_token(void *ctx, const st_token *t)
{
	acc *a = ctx;
	if (++a->count > a->max_tokens) {
		a->too_many = true;
		return 1;
	}
	cJSON *o = cJSON_CreateObject();
	char *term = cm_strndup(CM_MEM_COORD, t->term, t->len);
	cJSON_AddStringToObject(o, "token", term);
	cm_free(CM_MEM_COORD, term);
	cJSON_AddNumberToObject(o, "start_offset", a->offset + a->u16[t->start]);
	cJSON_AddNumberToObject(o, "end_offset", a->offset + a->u16[t->end]);
	const char *type = t->type;
	if (type == NULL)
		type = st_token_type(a->kind, a->text + t->start, t->end - t->start);
	cJSON_AddStringToObject(o, "type", type);
	cJSON_AddNumberToObject(o, "position", t->position);
	if (a->explain) {
		/* Lucene's BytesRef rendering and the attributes ES lists */
		char *hex = cm_malloc(CM_MEM_COORD, t->len * 3 + 3), *h = hex;
		*h++ = '[';
		for (size_t i = 0; i < t->len; i++)
			h += sprintf(h, i ? " %02x" : "%02x", (unsigned)(uint8_t)t->term[i]);
		*h++ = ']';
		*h = 0;
		cJSON_AddStringToObject(o, "bytes", hex);
		cm_free(CM_MEM_COORD, hex);
		cJSON_AddNumberToObject(o, "positionLength", 1);
		cJSON_AddNumberToObject(o, "termFrequency", 1);
	}
	cJSON_AddItemToArray(a->tokens, o);
	return 0;
}

/* Analyzes every value into a->tokens: offsets run on one past each
 * value, positions VALUE_GAP further (ES's gaps). stage SIZE_MAX: the
 * whole chain (or the built-in a->kind when chain is NULL). */
static cm_err
run_values(const cJSON *vals, const st_analyzer *chain, size_t stage, acc *a)
{
	const cJSON *it;
	uint32_t next = 0;
	int k = 0;
	cm_err rc = CM_OK;
	cJSON_ArrayForEach(it, vals)
	{
		size_t len = strlen(it->valuestring);
		const uint8_t *s = (const uint8_t *)it->valuestring;
		a->text = it->valuestring;
		a->u16 = cm_malloc(CM_MEM_COORD, (len + 1) * sizeof(uint32_t));
		uint32_t u = 0;
		for (size_t i = 0; i <= len; i++) {
			a->u16[i] = u;
			if (i < len && (s[i] & 0xC0) != 0x80)
				u += s[i] >= 0xF0 ? 2 : 1; /* beyond the BMP: a surrogate pair */
		}
		uint32_t first = k ? next + VALUE_GAP : 0;
		if (stage == SIZE_MAX)
			rc = st_analyze_with(chain, a->kind, it->valuestring, len, first, on_token,
			                     a, &next);
		else
			rc = st_analyzer_run_stage(chain, it->valuestring, len, first, stage,
			                           on_token, a, &next);
		cm_free(CM_MEM_COORD, a->u16);
		if (rc || a->too_many)
			break;
		a->offset += u + 1; /* ES's offset gap */
		k++;
	}
	return rc;
}

static void
invalid(co_req *r, const char *what)
{
	co_reply_errorf(r, CM_EINVAL, "action_request_validation_exception",
	                "Validation Failed: 1: %s;", what);
}

static bool
str_or_absent(co_req *r, const cJSON *v, const char *key)
{
	if (v == NULL || cJSON_IsString(v))
		return true;
	co_reply_errorf(r, CM_EPARSE, "x_content_parse_exception",
	                "[analyze_request] %s doesn't support values of type: %s", key,
	                cJSON_IsNumber(v)  ? "VALUE_NUMBER"
	                : cJSON_IsArray(v) ? "START_ARRAY"
	                                   : "VALUE_BOOLEAN");
	return false;
}

void
co_h_analyze(co_req *r)
{
	bool bad;
	cJSON *body = co_body_json(r, &bad);
	if (bad)
		return;
	const cJSON *text = cJSON_GetObjectItemCaseSensitive(body, "text");
	const cJSON *analyzer = cJSON_GetObjectItemCaseSensitive(body, "analyzer");
	const cJSON *tokenizer = cJSON_GetObjectItemCaseSensitive(body, "tokenizer");
	const cJSON *filter = cJSON_GetObjectItemCaseSensitive(body, "filter");
	const cJSON *char_filter = cJSON_GetObjectItemCaseSensitive(body, "char_filter");
	const cJSON *normalizer = cJSON_GetObjectItemCaseSensitive(body, "normalizer");
	const cJSON *field = cJSON_GetObjectItemCaseSensitive(body, "field");
	const cJSON *explain = cJSON_GetObjectItemCaseSensitive(body, "explain");
	const cJSON *it;
	nd_index **ixs = NULL;
	size_t nix = 0;
	st_mapping *m = NULL;
	st_analyzer *built = NULL;
	cm_error err = {0};

	cJSON_ArrayForEach(it, body)
	{
		static const char *const keys[] = {
		    "text",       "analyzer", "tokenizer", "filter",     "char_filter",
		    "normalizer", "field",    "explain",   "attributes", "index"};
		bool known = false;
		for (size_t i = 0; i < sizeof(keys) / sizeof(*keys); i++)
			known |= !strcmp(it->string, keys[i]);
		if (!known) {
			co_reply_errorf(r, CM_EPARSE, "x_content_parse_exception",
			                "[1:2] [analyze_request] unknown field [%s]", it->string);
			goto out;
		}
	}
	if (!str_or_absent(r, analyzer, "analyzer") ||
	    !str_or_absent(r, normalizer, "normalizer") || !str_or_absent(r, field, "field"))
		goto out;
	if (tokenizer && !cJSON_IsString(tokenizer) && !cJSON_IsObject(tokenizer)) {
		co_reply_errorf(r, CM_EPARSE, "x_content_parse_exception",
		                "[analyze_request] tokenizer must be a name or an object");
		goto out;
	}
	if (explain && !cJSON_IsBool(explain)) {
		co_reply_errorf(r, CM_EPARSE, "x_content_parse_exception",
		                "[analyze_request] explain must be a boolean");
		goto out;
	}
	bool text_ok =
	    cJSON_IsString(text) || (cJSON_IsArray(text) && cJSON_GetArraySize(text) > 0);
	cJSON_ArrayForEach(it, (cJSON_IsArray(text) ? text : NULL)) text_ok &= cJSON_IsString(it);
	if (!text_ok) {
		if (text && !cJSON_IsString(text) && !cJSON_IsArray(text)) {
			co_reply_errorf(
			    r, CM_EPARSE, "x_content_parse_exception",
			    "[analyze_request] text must be a string or an array of strings");
			goto out;
		}
		invalid(r, "text is missing");
		goto out;
	}
	const char *seg = co_seg(r, 0);
	bool has_index = seg != NULL && seg[0] != '_';
	if (normalizer && !has_index) {
		invalid(r, "index is required if normalizer is specified");
		goto out;
	}
	if (normalizer && (tokenizer || analyzer)) {
		invalid(r, "tokenizer/analyze should be null if normalizer is specified");
		goto out;
	}
	if (analyzer && (tokenizer || filter || char_filter)) {
		invalid(r, "cannot define extra components on a named analyzer");
		goto out;
	}
	if (has_index) {
		if (!co_resolve(r, seg, &ixs, &nix))
			goto out;
		if (nix != 1) {
			co_reply_errorf(r, CM_EINVAL, "illegal_argument_exception",
			                "[%s] must resolve to one index, found %zu", seg, nix);
			goto out;
		}
		m = nd_index_mapping(ixs[0]);
	}
	const st_analysis *an = m ? m->analysis : NULL;
	acc a = {.tokens = cJSON_CreateArray(),
	         .kind = ST_AN_STANDARD,
	         .max_tokens = nix == 1 ? nd_index_setting_int(ixs[0], "analyze.max_token_count",
	                                                       MAX_ANALYZE_TOKENS)
	                                : MAX_ANALYZE_TOKENS};
	const st_analyzer *chain = NULL;
	if (field && !analyzer && !tokenizer && !normalizer) {
		if (!has_index) {
			cJSON_Delete(a.tokens);
			co_reply_errorf(r, CM_EINVAL, "illegal_argument_exception",
			                "analysis based on a specific field requires an index");
			goto out;
		}
		const st_field_def *d = st_mapping_find(m, field->valuestring);
		if (d && d->type == ST_FT_TEXT) {
			a.kind = d->analyzer;
			chain = d->custom_analyzer;
		} else if (d && d->type == ST_FT_KEYWORD) {
			a.kind = ST_AN_KEYWORD;
			chain = d->normalizer;
		}
	} else if (analyzer) {
		if (!st_analysis_resolve(an, analyzer->valuestring, &a.kind, &chain)) {
			cJSON_Delete(a.tokens);
			co_reply_errorf(r, CM_EINVAL, "illegal_argument_exception",
			                "failed to find %sanalyzer [%s]",
			                has_index ? "" : "global ", analyzer->valuestring);
			goto out;
		}
	} else if (normalizer) {
		chain = st_analysis_normalizer(an, normalizer->valuestring);
		if (chain == NULL) {
			cJSON_Delete(a.tokens);
			co_reply_errorf(r, CM_EINVAL, "illegal_argument_exception",
			                "failed to find normalizer under [%s]",
			                normalizer->valuestring);
			goto out;
		}
	} else if (tokenizer || filter || char_filter) {
		/* filters alone run on the keyword tokenizer, as ES does */
		cJSON *kw = tokenizer ? NULL : cJSON_CreateString("keyword");
		cm_err rc = st_analyzer_build(an, tokenizer ? tokenizer : kw, filter, char_filter,
		                              false, &built, &err);
		cJSON_Delete(kw);
		if (rc) {
			cJSON_Delete(a.tokens);
			co_reply_error(r, &err, NULL);
			goto out;
		}
		chain = built;
	}
	cJSON *one = cJSON_IsString(text) ? cJSON_CreateStringReference(text->valuestring) : NULL;
	cJSON *arr = NULL;
	if (one) {
		arr = cJSON_CreateArray();
		cJSON_AddItemToArray(arr, one);
	}
	const cJSON *vals = arr ? arr : text;
	cJSON *res = cJSON_CreateObject();
	cm_err rc = CM_OK;
	size_t ncf = 0, nstages = chain ? st_analyzer_stages(chain, &ncf) : 0;
	if (!cJSON_IsTrue(explain)) {
		rc = run_values(vals, chain, SIZE_MAX, &a);
		cJSON_AddItemToObject(res, "tokens", a.tokens);
	} else {
		cJSON_Delete(a.tokens);
		a.explain = true;
		cJSON *detail = cJSON_AddObjectToObject(res, "detail");
		cJSON_AddBoolToObject(detail, "custom_analyzer", nstages > 0);
		if (nstages == 0) {
			cJSON *o = cJSON_AddObjectToObject(detail, "analyzer");
			const char *name = analyzer ? analyzer->valuestring
			                   : chain  ? st_analyzer_get_name(chain)
			                            : st_analyzer_name(a.kind);
			cJSON_AddStringToObject(o, "name", name);
			a.tokens = cJSON_AddArrayToObject(o, "tokens");
			rc = run_values(vals, chain, SIZE_MAX, &a);
		} else {
			cJSON *cfs = ncf ? cJSON_AddArrayToObject(detail, "charfilters") : NULL;
			for (size_t i = 0; i < ncf; i++) {
				cJSON *o = cJSON_CreateObject(), *ft;
				cJSON_AddItemToArray(cfs, o);
				cJSON_AddStringToObject(o, "name",
				                        st_analyzer_stage_name(chain, true, i));
				ft = cJSON_AddArrayToObject(o, "filtered_text");
				cJSON_ArrayForEach(it, vals)
				{
					cm_buf b;
					cm_buf_init(&b, CM_MEM_COORD);
					st_analyzer_char_filtered(chain, it->valuestring,
					                          strlen(it->valuestring), i, &b);
					cm_buf_put(&b, "", 1);
					cJSON_AddItemToArray(
					    ft, cJSON_CreateString((const char *)b.data));
					cm_buf_free(&b);
				}
			}
			cJSON *tfs = nstages > 1 ? cJSON_CreateArray() : NULL;
			for (size_t st = 0; st < nstages && !rc && !a.too_many; st++) {
				cJSON *o = cJSON_CreateObject();
				cJSON_AddStringToObject(o, "name",
				                        st_analyzer_stage_name(chain, false, st));
				a.tokens = cJSON_AddArrayToObject(o, "tokens");
				a.offset = 0;
				a.count = 0;
				if (st == 0)
					cJSON_AddItemToObject(detail, "tokenizer", o);
				else
					cJSON_AddItemToArray(tfs, o);
				rc = run_values(vals, chain, st, &a);
			}
			if (tfs)
				cJSON_AddItemToObject(detail, "tokenfilters", tfs);
		}
	}
	cJSON_Delete(arr);
	if (a.too_many || rc) {
		cJSON_Delete(res);
		if (a.too_many)
			co_reply_errorf(
			    r, CM_EINVAL, "illegal_argument_exception",
			    "The number of tokens produced by calling _analyze has exceeded "
			    "the allowed maximum of [%lld]. This limit can be set by changing "
			    "the [index.analyze.max_token_count] index level setting.",
			    a.max_tokens);
		else
			co_reply_errorf(r, rc, "illegal_argument_exception", "analysis failed: %s",
			                cm_err_msg(rc));
		goto out;
	}
	co_reply_json(r, 200, res);
out:
	st_analyzer_free(built);
	st_mapping_unref(m);
	if (ixs)
		co_release_all(ixs, nix);
	cJSON_Delete(body);
}
