/* status.c — status strings, per-thread last error, logging. */
#include "base.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];
static tern_log_level_t log_level = TERN_LOG_WARN;

const char *tern_status_string(tern_status_t status) {
    switch (status) {
    case TERN_OK: return "ok";
    case TERN_ERR_IO: return "I/O error";
    case TERN_ERR_FORMAT: return "bad file format";
    case TERN_ERR_MISMATCH: return "mismatch";
    case TERN_ERR_UNSUPPORTED: return "unsupported";
    case TERN_ERR_INVALID_ARG: return "invalid argument";
    case TERN_ERR_INPUT: return "bad input";
    case TERN_ERR_NOMEM: return "out of memory";
    case TERN_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *tern_last_error(void) { return last_error; }

tern_status_t tern_error(tern_status_t status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

tern_status_t tern_error_prefix(tern_status_t status, const char *fmt, ...) {
    char prefix[512], old[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    snprintf(last_error, sizeof last_error, "%s: %s", prefix, old);
    return status;
}

void tern_set_log_level(tern_log_level_t level) { log_level = level; }

void tern_log(tern_log_level_t level, const char *fmt, ...) {
    if (level > log_level || level == TERN_LOG_QUIET) return;
    static const char *names[] = {"", "error", "warning", "info", "debug"};
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "tern: %s: %s\n", names[level], buf);
}
