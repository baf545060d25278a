/* status.c — status strings, per-thread last error, logging. */
#include "base/base.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];
static int log_level = TERN_LOG_WARN; /* read and written atomically */
/* the log callback and its user_data, changed together under the lock */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static tern_log_fn log_fn;
static void *log_data;

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
    case TERN_ERR_CANCELLED: return "cancelled";
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

void tern_set_log_level(tern_log_level_t level) { __atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED); }

void tern_set_log_callback(tern_log_fn fn, void *user_data) {
    pthread_mutex_lock(&log_lock);
    log_fn = fn;
    log_data = user_data;
    pthread_mutex_unlock(&log_lock);
}

void tern_log(tern_log_level_t level, const char *fmt, ...) {
    if ((int)level > __atomic_load_n(&log_level, __ATOMIC_RELAXED) || level == TERN_LOG_QUIET) return;
    static const char *names[] = {"", "error", "warning", "info", "debug"};
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&log_lock);
    tern_log_fn fn = log_fn;
    void *data = log_data;
    pthread_mutex_unlock(&log_lock);
    if (fn) fn(level, buf, data);
    else fprintf(stderr, "tern: %s: %s\n", names[level], buf);
}

tern_status_t api_struct_in(void *dst, const void *src, const void *defaults, size_t known, size_t base,
                            const char *type) {
    size_t size = known;
    if (src) {
        memcpy(&size, src, sizeof size);
        if (size == 0) size = base;
        if (size < sizeof(size_t) || size > known)
            return tern_error(TERN_ERR_INVALID_ARG,
                              "%s.struct_size is %zu: this libtern (%s) knows %zu bytes of it (start from "
                              "the library's defaults; a program built against a newer tern.h needs a newer "
                              "libtern)", type, size, TERN_VERSION, known);
    }
    if (dst != defaults) memcpy(dst, defaults, known);
    if (src) memmove(dst, src, size);
    memcpy(dst, &known, sizeof known);
    return TERN_OK;
}
