#include "jsonw.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
sr_jw_str(cm_buf *b, const char *s, size_t n)
{
	cm_buf_put_json_str(b, s, n);
}

void
sr_jw_cstr(cm_buf *b, const char *s)
{
	sr_jw_str(b, s, strlen(s));
}

/* Shortest "%.Ne" digits that read back as v; returns the digit count. */
static int
shortest_digits(double v, bool is_float, char *mant, int *exp10)
{
	char tmp[40];
	int p;
	/* Digits below 6 (float) / 15 (double) always round to the shortest
	 * form padded with zeros, which are stripped below: start there. */
	for (p = is_float ? 6 : 15; p <= 17; p++) {
		snprintf(tmp, sizeof(tmp), "%.*e", p - 1, v);
		double back = strtod(tmp, NULL);
		if (is_float ? (float)back == (float)v : back == v)
			break;
	}
	if (p > 17)
		p = 17;
	snprintf(tmp, sizeof(tmp), "%.*e", p - 1, v);
	/* tmp: d[.ddd]e±XX */
	int n = 0;
	char *e = strchr(tmp, 'e');
	for (char *c = tmp; c < e; c++)
		if (*c != '.')
			mant[n++] = *c;
	while (n > 1 && mant[n - 1] == '0')
		n--;
	mant[n] = '\0';
	*exp10 = atoi(e + 1);
	return n;
}

/* Java's Double/Float.toString layout: plain decimal for 1e-3 <= |v| < 1e7,
 * else computerized scientific notation, always with a fractional digit. */
static void
java_number(cm_buf *b, double v, bool is_float)
{
	if (isnan(v) || isinf(v)) {
		cm_buf_put(b, "null", 4);
		return;
	}
	if (v == 0) {
		cm_buf_put(b, signbit(v) ? "-0.0" : "0.0", signbit(v) ? 4 : 3);
		return;
	}
	char mant[24];
	int e;
	if (v < 0) {
		cm_buf_put_u8(b, '-');
		v = -v;
	}
	int n = shortest_digits(v, is_float, mant, &e);
	if (v >= 1e-3 && v < 1e7) {
		if (e >= 0) {
			for (int i = 0; i <= e; i++)
				cm_buf_put_u8(b, i < n ? mant[i] : '0');
			cm_buf_put_u8(b, '.');
			if (e + 1 < n)
				cm_buf_put(b, mant + e + 1, n - e - 1);
			else
				cm_buf_put_u8(b, '0');
		} else {
			cm_buf_put(b, "0.", 2);
			for (int i = 0; i < -e - 1; i++)
				cm_buf_put_u8(b, '0');
			cm_buf_put(b, mant, n);
		}
		return;
	}
	cm_buf_put_u8(b, mant[0]);
	cm_buf_put_u8(b, '.');
	if (n > 1)
		cm_buf_put(b, mant + 1, n - 1);
	else
		cm_buf_put_u8(b, '0');
	cm_buf_printf(b, "E%d", e);
}

void
sr_jw_float(cm_buf *b, float f)
{
	/* The last float rendered on this thread, and its text: the hits of a
	 * page often share a score (match_all, a keyword term, a filter), and
	 * finding the shortest digits is a few snprintf/strtod rounds. */
	static _Thread_local uint32_t last_bits = 0x7fc00001u; /* a NaN never stored */
	static _Thread_local char last_text[32];
	static _Thread_local uint8_t last_len;
	uint32_t bits;
	memcpy(&bits, &f, sizeof bits);
	if (bits == last_bits && last_len) {
		cm_buf_put(b, last_text, last_len);
		return;
	}
	size_t at = b->len;
	java_number(b, f, true);
	if (b->len - at < sizeof last_text) {
		last_bits = bits;
		last_len = (uint8_t)(b->len - at);
		memcpy(last_text, b->data + at, last_len);
	}
}

void
sr_jw_double(cm_buf *b, double d)
{
	java_number(b, d, false);
}

void
sr_jw_number_text(double d, char *out, size_t cap)
{
	if (d == floor(d) && fabs(d) < 9.2e18) {
		snprintf(out, cap, "%lld", (long long)d);
		return;
	}
	for (int p = 1; p <= 17; p++) {
		snprintf(out, cap, "%.*g", p, d);
		if (strtod(out, NULL) == d)
			return;
	}
}
