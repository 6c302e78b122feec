/* Between the built-in analyzers (analysis.c) and custom chains
 * (an_chain.c): the tokenizers' raw mode and small Unicode helpers. */
#ifndef AN_PRIVATE_H
#define AN_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*an_raw_fn)(void *ctx, size_t start, size_t end);

typedef enum { AN_RAW_STANDARD, AN_RAW_WHITESPACE, AN_RAW_LETTER } an_raw_tokenizer;

/* Runs a built-in tokenizer, handing each token's byte range to fn
 * without case folding; tokens longer than max_len code points split. */
void an_tokenize_raw(an_raw_tokenizer which, const char *text, size_t len, uint32_t max_len,
                     an_raw_fn fn, void *ctx);
/* The standard tokenizer's type for a token's source bytes:
 * <ALPHANUM>, <NUM>, <IDEOGRAPHIC>, <HIRAGANA>, <KATAKANA>, <HANGUL>. */
const char *an_standard_type(const char *text, size_t len);
/* One UTF-8 sequence; -1 (length 1) when malformed. */
int32_t an_utf8_decode(const uint8_t *s, size_t n, size_t *len);
/* Java's Character.isWhitespace. */
bool an_is_space(int32_t c);

#endif
