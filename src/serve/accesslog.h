/* accesslog.h — the access log of `tern serve` (--access-log FILE|-, --access-log-format): one
 * line per request, in Apache's combined format or as JSON lines. Workers only format the line
 * and append it to a memory buffer (a mutex held for a copy); a thread of the log writes the
 * buffer out, so a slow disk or a full pipe never holds a worker. A line that finds the buffer
 * full (ALOG_BUFFER bytes waiting) is dropped and counted. alog_reopen() (SIGHUP) reopens the
 * file by name, as logrotate expects. */
#ifndef TERN_SERVE_ACCESSLOG_H
#define TERN_SERVE_ACCESSLOG_H

#include <stdint.h>

#include "base/base.h"

#define ALOG_BUFFER (4 << 20)

typedef struct alog alog_t;

typedef struct {
    double time;            /* seconds since the epoch, when the request's headers came */
    const char *client;     /* address (the forwarded client behind a trusted proxy) */
    const char *method, *path, *version;
    int status;             /* 0: no response (the client went away) */
    uint64_t bytes;         /* of the response body */
    double duration;        /* seconds from the headers to the response */
    const char *user_agent, *referer; /* NULL: none */
    const char *request_id;
} alog_entry_t;

/* path "-": standard output. json: JSON lines, else combined. */
tern_status_t alog_open(alog_t **log, const char *path, int json);
void alog_write(alog_t *log, const alog_entry_t *e);
void alog_reopen(alog_t *log);
uint64_t alog_dropped(alog_t *log);
/* Writes what is waiting, stops the thread, closes the file. */
void alog_close(alog_t *log);
/* The line of e (no newline) into buf; its length (truncated to n - 1). Exposed for the tests. */
size_t alog_format(const alog_entry_t *e, int json, char *buf, size_t n);

#endif
