/* Logging to stderr with a level and a module tag. Messages must be
 * log-safe: never credentials, never raw user input beyond short names. */
#ifndef CM_LOG_H
#define CM_LOG_H

typedef enum { CM_LOG_DEBUG, CM_LOG_INFO, CM_LOG_WARN, CM_LOG_ERROR } cm_log_level;

void cm_log_set_level(cm_log_level lvl);
void cm_log(cm_log_level lvl, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define cm_debug(mod, ...) cm_log(CM_LOG_DEBUG, mod, __VA_ARGS__)
#define cm_info(mod, ...) cm_log(CM_LOG_INFO, mod, __VA_ARGS__)
#define cm_warn(mod, ...) cm_log(CM_LOG_WARN, mod, __VA_ARGS__)
#define cm_errorlog(mod, ...) cm_log(CM_LOG_ERROR, mod, __VA_ARGS__)

#endif
