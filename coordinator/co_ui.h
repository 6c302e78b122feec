/* The cluster page's files, compiled into the binary at build time
 * (cmake/embed_ui.cmake turns the files of coordinator/ui into co_ui_assets.c in the
 * build directory; nothing generated is committed). */
#ifndef CO_UI_H
#define CO_UI_H

#include <stddef.h>

typedef struct co_ui_asset {
	const char *name;  /* "index.html" */
	const char *type;  /* Content-Type */
	const char *etag;  /* "\"<sha256 prefix>\"", quoted as sent */
	const unsigned char *data;
	size_t len;
} co_ui_asset;

extern const co_ui_asset co_ui_assets[];
extern const size_t co_ui_nassets;

#endif
