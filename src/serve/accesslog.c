/* accesslog.c — the access log (accesslog.h). */
#include "serve/accesslog.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct alog {
    char *path; /* NULL: stdout */
    int json, fd;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *buf;
    size_t len;
    int stop, reopen;
    atomic_uint_fast64_t dropped;
};

typedef struct {
    char *p;
    size_t len, cap;
} out_t;

static void put(out_t *o, const char *s, size_t n) {
    for (size_t i = 0; i < n && o->len + 1 < o->cap; i++) o->p[o->len++] = s[i];
}

static void putf(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(out_t *o, const char *fmt, ...) {
    char t[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t, sizeof t, fmt, ap);
    va_end(ap);
    if (k > 0) put(o, t, (size_t)k < sizeof t ? (size_t)k : sizeof t - 1);
}

/* A quoted field of the combined format: '"', '\\', controls and bytes >= 0x7f as \xHH (Apache's
 * escaping), so a line is always one line of printable ASCII. */
static void put_combined(out_t *o, const char *s) {
    if (!s) {
        put(o, "-", 1);
        return;
    }
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\' || *p < 0x20 || *p >= 0x7f) putf(o, "\\x%02x", *p);
        else put(o, (const char *)p, 1);
    }
}

/* A JSON string (quotes included); bytes of invalid UTF-8 as U+FFFD. */
static void put_json(out_t *o, const char *s) {
    if (!s) {
        put(o, "null", 4);
        return;
    }
    put(o, "\"", 1);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        if (c == '"' || c == '\\') {
            put(o, "\\", 1);
            put(o, (const char *)p, 1);
            p++;
        } else if (c < 0x20) {
            putf(o, "\\u%04x", c);
            p++;
        } else if (c < 0x80) {
            put(o, (const char *)p, 1);
            p++;
        } else { /* a well-formed UTF-8 sequence as it is (no overlong forms, no surrogates) */
            int k = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
            int ok = k > 0;
            for (int i = 1; ok && i < k; i++) ok = (p[i] & 0xc0) == 0x80;
            if (ok && k == 3) {
                unsigned cp = ((c & 0x0f) << 12) | ((p[1] & 0x3fu) << 6);
                ok = cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff);
            }
            if (ok && k == 4) {
                unsigned cp = ((c & 0x07) << 18) | ((p[1] & 0x3fu) << 12);
                ok = cp >= 0x10000 && cp <= 0x10ffff;
            }
            if (ok) {
                put(o, (const char *)p, (size_t)k);
                p += k;
            } else {
                put(o, "\xef\xbf\xbd", 3);
                p++;
            }
        }
    }
    put(o, "\"", 1);
}

size_t alog_format(const alog_entry_t *e, int json, char *buf, size_t n) {
    out_t o = {buf, 0, n};
    time_t t = (time_t)e->time;
    struct tm tm;
    if (json) {
        gmtime_r(&t, &tm);
        char ts[64];
        strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
        putf(&o, "{\"time\":\"%s.%03dZ\",\"client\":", ts, (int)((e->time - (double)t) * 1000) % 1000);
        put_json(&o, e->client);
        put(&o, ",\"method\":", 10);
        put_json(&o, e->method);
        put(&o, ",\"path\":", 8);
        put_json(&o, e->path);
        put(&o, ",\"protocol\":", 12);
        put_json(&o, e->version);
        putf(&o, ",\"status\":%d,\"bytes\":%llu,\"duration\":%.6f,\"user_agent\":", e->status,
             (unsigned long long)e->bytes, e->duration);
        put_json(&o, e->user_agent);
        put(&o, ",\"referer\":", 11);
        put_json(&o, e->referer);
        put(&o, ",\"request_id\":", 14);
        put_json(&o, e->request_id);
        put(&o, "}", 1);
    } else { /* %h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-agent}i" */
        localtime_r(&t, &tm);
        char ts[64];
        strftime(ts, sizeof ts, "%d/%b/%Y:%H:%M:%S %z", &tm);
        put_combined(&o, e->client);
        putf(&o, " - - [%s] \"", ts);
        put_combined(&o, e->method);
        put(&o, " ", 1);
        put_combined(&o, e->path);
        put(&o, " ", 1);
        put_combined(&o, e->version);
        if (e->status) putf(&o, "\" %d ", e->status);
        else put(&o, "\" 499 ", 6); /* nginx's code for a client that closed the connection */
        if (e->bytes) putf(&o, "%llu", (unsigned long long)e->bytes);
        else put(&o, "-", 1);
        put(&o, " \"", 2);
        put_combined(&o, e->referer);
        put(&o, "\" \"", 3);
        put_combined(&o, e->user_agent);
        put(&o, "\"", 1);
    }
    buf[o.len] = 0;
    return o.len;
}

static int open_file(const char *path) {
    return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

static void write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return; /* a full disk: the lines are lost, the server goes on */
        p += k;
        n -= (size_t)k;
    }
}

static void *writer(void *arg) {
    alog_t *l = arg;
    char *mine = malloc(ALOG_BUFFER);
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->len && !l->stop && !l->reopen) pthread_cond_wait(&l->cv, &l->mu);
        size_t n = l->len;
        if (mine && n) memcpy(mine, l->buf, n);
        l->len = 0;
        int stop = l->stop, reopen = l->reopen;
        l->reopen = 0;
        pthread_mutex_unlock(&l->mu);
        if (mine && n) write_all(l->fd, mine, n);
        if (reopen && l->path) {
            int fd = open_file(l->path);
            if (fd >= 0) {
                close(l->fd);
                l->fd = fd;
            } else
                fprintf(stderr, "tern serve: %s: cannot reopen the access log (%s); writing on to the old file\n",
                        l->path, strerror(errno));
        }
        pthread_mutex_lock(&l->mu);
        if (stop && !l->len) break;
    }
    pthread_mutex_unlock(&l->mu);
    free(mine);
    return NULL;
}

tern_status_t alog_open(alog_t **out, const char *path, int json) {
    *out = NULL;
    alog_t *l = calloc(1, sizeof *l);
    if (!l || !(l->buf = malloc(ALOG_BUFFER))) {
        free(l);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    l->json = json;
    if (strcmp(path, "-")) {
        l->path = strdup(path);
        l->fd = l->path ? open_file(path) : -1;
        if (l->fd < 0) {
            tern_status_t st = tern_error(TERN_ERR_IO, "--access-log %s: cannot open for writing (%s)", path,
                                          strerror(errno));
            free(l->path), free(l->buf), free(l);
            return st;
        }
    } else
        l->fd = STDOUT_FILENO;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    if (pthread_create(&l->thread, NULL, writer, l)) {
        if (l->path) close(l->fd);
        free(l->path), free(l->buf), free(l);
        return tern_error(TERN_ERR_NOMEM, "cannot start the access log's thread");
    }
    *out = l;
    return TERN_OK;
}

void alog_write(alog_t *l, const alog_entry_t *e) {
    char line[8192];
    size_t n = alog_format(e, l->json, line, sizeof line - 1);
    line[n++] = '\n';
    pthread_mutex_lock(&l->mu);
    if (l->len + n <= ALOG_BUFFER) {
        memcpy(l->buf + l->len, line, n);
        l->len += n;
        pthread_cond_signal(&l->cv);
    } else
        atomic_fetch_add(&l->dropped, 1);
    pthread_mutex_unlock(&l->mu);
}

void alog_reopen(alog_t *l) {
    pthread_mutex_lock(&l->mu);
    l->reopen = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

uint64_t alog_dropped(alog_t *l) { return atomic_load(&l->dropped); }

void alog_close(alog_t *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    if (l->path) close(l->fd);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l->path);
    free(l->buf);
    free(l);
}
