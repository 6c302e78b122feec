/* Pre-parse checks on request JSON: UTF-8, nesting depth, numeric range.
 * One linear pass, no allocation. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "co_guard.h"

bool
co_utf8_valid(const unsigned char *s, size_t len, size_t *bad_at)
{
	size_t i = 0;
	while (i < len) {
		unsigned c = s[i];
		size_t n;
		unsigned cp;
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			n = 1;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			n = 2;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			n = 3;
			cp = c & 0x07;
		} else {
			goto bad;
		}
		if (len - i <= n)
			goto bad;
		for (size_t k = 1; k <= n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				goto bad;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		/* overlong forms, UTF-16 surrogates, beyond Unicode */
		if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || (cp >= 0xd800 && cp <= 0xdfff) ||
		    cp > 0x10ffff)
			goto bad;
		i += n + 1;
	}
	return true;
bad:
	if (bad_at)
		*bad_at = i;
	return false;
}

bool
co_json_guard(const char *text, size_t len, char *msg, size_t msgcap)
{
	const unsigned char *p = (const unsigned char *)text;
	size_t bad;
	int depth = 0;
	bool in_str = false;

	msg[0] = 0;
	if (!co_utf8_valid(p, len, &bad)) {
		snprintf(msg, msgcap, "Invalid UTF-8 start byte 0x%02x at byte %zu", p[bad], bad);
		return false;
	}
	for (size_t i = 0; i < len; i++) {
		unsigned char c = p[i];
		if (in_str) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_str = false;
			continue;
		}
		if (c == '"') {
			in_str = true;
		} else if (c == '{' || c == '[') {
			if (++depth > CO_JSON_MAX_DEPTH) {
				snprintf(msg, msgcap,
				         "The nesting depth of the request body exceeds the maximum allowed depth "
				         "[%d]",
				         CO_JSON_MAX_DEPTH);
				return false;
			}
		} else if (c == '}' || c == ']') {
			depth--;
		} else if (c == '-' || isdigit(c)) {
			/* a number token: copy (bounded) and check it fits a double */
			char num[64];
			size_t j = i, k = 0;
			while (j < len && (isdigit(p[j]) || strchr("+-.eE", p[j])))
				j++;
			if (j - i >= sizeof(num)) {
				/* more than 63 characters: only its exponent keeps it finite;
				 * let strtod judge a bounded prefix with the exponent kept */
				size_t digits = 0;
				for (size_t q = i; q < j && (isdigit(p[q]) || p[q] == '-'); q++)
					digits += isdigit(p[q]) != 0;
				const unsigned char *e = memchr(p + i, 'e', j - i);
				if (!e)
					e = memchr(p + i, 'E', j - i);
				if (!e && digits > 308) {
					snprintf(msg, msgcap, "Numeric value out of range at byte %zu", i);
					return false;
				}
				i = j - 1;
				continue;
			}
			memcpy(num, p + i, j - i);
			num[j - i] = 0;
			k = j - i;
			(void)k;
			errno = 0;
			double v = strtod(num, NULL);
			if (isinf(v) || (errno == ERANGE && fabs(v) > 1.0)) {
				snprintf(msg, msgcap, "Numeric value (%.40s) out of range at byte %zu", num, i);
				return false;
			}
			i = j - 1;
		}
	}
	return true;
}
