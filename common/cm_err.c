#include "cm_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const struct {
	int status;
	const char *type, *msg, *name;
} cm_err_table[] = {
#define CM_ERR_ROW(name, status, type, msg) {status, type, msg, #name},
    CM_ERRORS(CM_ERR_ROW)
#undef CM_ERR_ROW
};

static int
cm_err_valid(cm_err e)
{
	return (int)e >= 0 && e < CM_ERR_COUNT;
}

int
cm_err_status(cm_err e)
{
	return cm_err_valid(e) ? cm_err_table[e].status : 500;
}

const char *
cm_err_type(cm_err e)
{
	return cm_err_valid(e) ? cm_err_table[e].type : "exception";
}

const char *
cm_err_msg(cm_err e)
{
	return cm_err_valid(e) ? cm_err_table[e].msg : "unknown error";
}

const char *
cm_err_name(cm_err e)
{
	return cm_err_valid(e) ? cm_err_table[e].name : "CM_E?";
}

static cm_err
error_setv(cm_error *e, cm_err code, const char *type, const char *fmt, va_list ap)
{
	if (e == NULL || e->code != CM_OK)
		return code;
	e->code = code;
	e->type_override[0] = '\0';
	if (type != NULL)
		snprintf(e->type_override, sizeof(e->type_override), "%s", type);
	vsnprintf(e->reason, sizeof(e->reason), fmt, ap);
	return code;
}

cm_err
cm_error_set(cm_error *e, cm_err code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	error_setv(e, code, NULL, fmt, ap);
	va_end(ap);
	return code;
}

cm_err
cm_error_set_type(cm_error *e, cm_err code, const char *type, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	error_setv(e, code, type, fmt, ap);
	va_end(ap);
	return code;
}

const char *
cm_error_type(const cm_error *e)
{
	return e->type_override[0] ? e->type_override : cm_err_type(e->code);
}

void
cm_error_clear(cm_error *e)
{
	memset(e, 0, sizeof(*e));
}
