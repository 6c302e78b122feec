#include "cm_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static cm_log_level cm_log_min = CM_LOG_INFO;

void
cm_log_set_level(cm_log_level lvl)
{
	cm_log_min = lvl;
}

void
cm_log(cm_log_level lvl, const char *module, const char *fmt, ...)
{
	static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
	char ts[32];
	struct timespec now;
	struct tm tm;
	va_list ap;

	if (lvl < cm_log_min)
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	flockfile(stderr);
	fprintf(stderr, "[%s.%03ldZ][%-5s][%s] ", ts, now.tv_nsec / 1000000, names[lvl], module);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	funlockfile(stderr);
}
