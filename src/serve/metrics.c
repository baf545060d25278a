/* metrics.c — counters and the Prometheus text format (version 0.0.4) of GET /metrics. */
#include "serve/metrics.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const int codes[METRICS_CODES] = {200, 204, 400, 401, 403, 404, 405, 413, 429, 500, 503, 0, 0};
static const double buckets[METRICS_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                1,     2.5,  5,     10,   30,  60,  120};
static const char *const route_names[] = {"/",       "/translate", "/languages", "/v1/translate",
                                                 "/v1/score", "/v1/models", "/health",    "/metrics",
                                                 "/openapi.json", "/frontend/settings", "/detect", "/translate_file",
                                                 "/download_file", "other"};
_Static_assert(sizeof route_names / sizeof route_names[0] == R_COUNT, "a name for every route");

void metrics_init(metrics_t *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void metrics_free(metrics_t *m) { pthread_mutex_destroy(&m->mu); }

void metrics_request(metrics_t *m, route_t route, int status, double seconds) {
    int k = METRICS_CODES - 1; /* last slot: any other code */
    for (int i = 0; i < METRICS_CODES - 2; i++)
        if (codes[i] == status) k = i;
    int b = 0;
    while (b < METRICS_BUCKETS && seconds > buckets[b]) b++;
    pthread_mutex_lock(&m->mu);
    m->requests[route][k]++;
    m->latency[route][b]++;
    m->latency_sum[route] += seconds;
    m->latency_count[route]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_disconnect(metrics_t *m, route_t route) {
    pthread_mutex_lock(&m->mu);
    m->disconnects[route]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_rejected(metrics_t *m) {
    pthread_mutex_lock(&m->mu);
    m->rejected++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_translated(metrics_t *m, int segments, long tokens) {
    (void)tokens;
    pthread_mutex_lock(&m->mu);
    m->segments += (uint64_t)segments;
    pthread_mutex_unlock(&m->mu);
}

typedef struct {
    char *buf;
    size_t len, cap;
    int oom;
} sb_t;

static void sb_printf(sb_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sb_t *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->buf ? b->buf + b->len : NULL, b->buf ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->buf && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 8192;
        while (cap < b->len + (size_t)n + 1) cap *= 2;
        char *p = realloc(b->buf, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->buf = p;
        b->cap = cap;
    }
}

/* tern_http_requests_total: a row for each route and status code that has answered. */
static void render_requests(sb_t *b, const metrics_t *c) {
    sb_printf(b, "# HELP tern_http_requests_total HTTP requests answered, by route and status code.\n"
                 "# TYPE tern_http_requests_total counter\n");
    for (int r = 0; r < R_COUNT; r++)
        for (int k = 0; k < METRICS_CODES; k++) {
            if (!c->requests[r][k]) continue;
            if (k < METRICS_CODES - 2)
                sb_printf(b, "tern_http_requests_total{route=\"%s\",code=\"%d\"} %llu\n", route_names[r], codes[k],
                          (unsigned long long)c->requests[r][k]);
            else
                sb_printf(b, "tern_http_requests_total{route=\"%s\",code=\"other\"} %llu\n", route_names[r],
                          (unsigned long long)c->requests[r][k]);
        }
}

/* tern_http_request_duration_seconds: the latency histogram of each route that has answered. */
static void render_latency(sb_t *b, const metrics_t *c) {
    sb_printf(b, "# HELP tern_http_request_duration_seconds Time from a request's headers to its response.\n"
                 "# TYPE tern_http_request_duration_seconds histogram\n");
    for (int r = 0; r < R_COUNT; r++) {
        if (!c->latency_count[r]) continue;
        uint64_t cum = 0;
        for (int k = 0; k < METRICS_BUCKETS; k++) {
            cum += c->latency[r][k];
            sb_printf(b, "tern_http_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %llu\n", route_names[r],
                      buckets[k], (unsigned long long)cum);
        }
        cum += c->latency[r][METRICS_BUCKETS];
        sb_printf(b, "tern_http_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n", route_names[r],
                  (unsigned long long)cum);
        sb_printf(b, "tern_http_request_duration_seconds_sum{route=\"%s\"} %.6f\n", route_names[r], c->latency_sum[r]);
        sb_printf(b, "tern_http_request_duration_seconds_count{route=\"%s\"} %llu\n", route_names[r],
                  (unsigned long long)c->latency_count[r]);
    }
}

/* The server's other counters: client disconnects by route, rejections, requests in flight and
 * segments answered. */
static void render_server_counters(sb_t *b, const metrics_t *c, int inflight) {
    sb_printf(b, "# HELP tern_http_client_disconnects_total Requests abandoned by their client before the answer.\n"
                 "# TYPE tern_http_client_disconnects_total counter\n");
    for (int r = 0; r < R_COUNT; r++)
        if (c->disconnects[r])
            sb_printf(b, "tern_http_client_disconnects_total{route=\"%s\"} %llu\n", route_names[r],
                      (unsigned long long)c->disconnects[r]);
    sb_printf(b, "# HELP tern_rejected_total Requests refused with 503 because a queue was full.\n"
                 "# TYPE tern_rejected_total counter\ntern_rejected_total %llu\n",
              (unsigned long long)c->rejected);
    sb_printf(b, "# HELP tern_http_requests_in_flight Requests received and not yet answered.\n"
                 "# TYPE tern_http_requests_in_flight gauge\ntern_http_requests_in_flight %d\n",
              inflight);
    sb_printf(b, "# HELP tern_segments_answered_total Segments (lines) returned to clients.\n"
                 "# TYPE tern_segments_answered_total counter\ntern_segments_answered_total %llu\n",
              (unsigned long long)c->segments);
}

/* The engine's gauges and counters, a row for each of its nm models (their stats st). */
static void render_model_counters(sb_t *b, engine_t *e, const engine_stats_t *st, int nm) {
    static const char *const help[][3] = {
        {"tern_queue_depth", "gauge", "Segments waiting in the model's queue."},
        {"tern_segments_running", "gauge", "Segments in batches being decoded."},
        {"tern_segments_total", "counter", "Segments decoded (translated or scored)."},
        {"tern_source_tokens_total", "counter", "Source tokens decoded."},
        {"tern_batch_padded_tokens_total", "counter", "Batch size times longest source, summed over batches."},
        {"tern_reloads_total", "counter", "Successful model reloads."},
        {"tern_reload_failures_total", "counter", "Failed model reloads (the old model kept serving)."},
    };
    for (size_t h = 0; h < sizeof help / sizeof help[0]; h++) {
        sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", help[h][0], help[h][2], help[h][0], help[h][1]);
        for (int i = 0; i < nm; i++) {
            unsigned long long v = 0;
            switch (h) {
            case 0: v = (unsigned long long)st[i].queued; break;
            case 1: v = (unsigned long long)st[i].running; break;
            case 2: v = st[i].segments; break;
            case 3: v = st[i].source_tokens; break;
            case 4: v = st[i].batch_tokens; break;
            case 5: v = st[i].reloads; break;
            case 6: v = st[i].reload_failures; break;
            }
            sb_printf(b, "%s{model=\"%s\"} %llu\n", help[h][0], engine_model_name(engine_model_at(e, i)), v);
        }
    }
}

/* tern_batch_size: the histogram of segments per decoded batch of each of the nm models. */
static void render_batch_sizes(sb_t *b, engine_t *e, const engine_stats_t *st, int nm) {
    sb_printf(b, "# HELP tern_batch_size Segments per decoded batch.\n# TYPE tern_batch_size histogram\n");
    for (int i = 0; i < nm; i++) {
        const char *name = engine_model_name(engine_model_at(e, i));
        uint64_t cum = 0;
        for (int k = 0; k < 10; k++) {
            cum += st[i].batch_size_hist[k];
            sb_printf(b, "tern_batch_size_bucket{model=\"%s\",le=\"%d\"} %llu\n", name, 1 << k, (unsigned long long)cum);
        }
        cum += st[i].batch_size_hist[10];
        sb_printf(b, "tern_batch_size_bucket{model=\"%s\",le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
        sb_printf(b, "tern_batch_size_sum{model=\"%s\"} %llu\ntern_batch_size_count{model=\"%s\"} %llu\n", name,
                  (unsigned long long)st[i].batch_segments, name, (unsigned long long)st[i].batches);
    }
}

/* Prometheus's standard process metrics (as its client libraries export them: the same names and
 * units) from /proc/self/stat, /proc/stat's btime and /proc/self/fd; the server's connections. */
static void render_process(sb_t *b, const metrics_extra_t *ex) {
    long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    FILE *f = fopen("/proc/self/stat", "r");
    char line[2048];
    if (f && fgets(line, sizeof line, f)) {
        /* fields after the command name (in parentheses, which may hold anything): state is 3 */
        const char *p = strrchr(line, ')');
        unsigned long long utime = 0, stime = 0, start = 0, vsize = 0;
        long long rss = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d "
                                "%llu %llu %lld", &utime, &stime, &start, &vsize, &rss) == 5 && tick > 0) {
            double btime = 0;
            FILE *g = fopen("/proc/stat", "r");
            char l2[256];
            while (g && fgets(l2, sizeof l2, g))
                if (!strncmp(l2, "btime ", 6)) btime = atof(l2 + 6);
            if (g) fclose(g);
            sb_printf(b, "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
                         "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.2f\n",
                      (double)(utime + stime) / (double)tick);
            sb_printf(b, "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
                         "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %lld\n",
                      rss * page);
            sb_printf(b, "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
                         "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes %llu\n", vsize);
            sb_printf(b, "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
                         "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.2f\n",
                      btime + (double)start / (double)tick);
        }
    }
    if (f) fclose(f);
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        long n = 0;
        struct dirent *e;
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') n++;
        closedir(d);
        sb_printf(b, "# HELP process_open_fds Number of open file descriptors.\n"
                     "# TYPE process_open_fds gauge\nprocess_open_fds %ld\n", n - 1); /* not opendir's own */
    }
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl))
        sb_printf(b, "# HELP process_max_fds Maximum number of open file descriptors.\n"
                     "# TYPE process_max_fds gauge\nprocess_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
    if (!ex) return;
    if (ex->connections >= 0)
        sb_printf(b, "# HELP tern_http_open_connections Client connections open now.\n"
                     "# TYPE tern_http_open_connections gauge\ntern_http_open_connections %d\n", ex->connections);
    sb_printf(b, "# HELP tern_http_slow_clients_closed_total Connections closed because their request did not "
                 "arrive whole within the connection timeout.\n"
                 "# TYPE tern_http_slow_clients_closed_total counter\ntern_http_slow_clients_closed_total %llu\n",
              (unsigned long long)ex->slow_closed);
    sb_printf(b, "# HELP tern_access_log_dropped_total Access log lines dropped (the log's buffer full).\n"
                 "# TYPE tern_access_log_dropped_total counter\ntern_access_log_dropped_total %llu\n",
              (unsigned long long)ex->log_dropped);
}

char *metrics_render(metrics_t *m, engine_t *e, int inflight, const metrics_extra_t *extra, size_t *len) {
    metrics_t c;
    pthread_mutex_lock(&m->mu);
    memcpy(&c, m, sizeof c);
    pthread_mutex_unlock(&m->mu);
    sb_t b = {0};
    render_requests(&b, &c);
    render_latency(&b, &c);
    render_server_counters(&b, &c, inflight);
    int nm = engine_num_models(e);
    engine_stats_t *st = calloc((size_t)(nm ? nm : 1), sizeof *st);
    if (!st) {
        free(b.buf);
        return NULL;
    }
    for (int i = 0; i < nm; i++) engine_model_stats(engine_model_at(e, i), &st[i]);
    render_model_counters(&b, e, st, nm);
    render_batch_sizes(&b, e, st, nm);
    render_process(&b, extra);
    free(st);
    if (b.oom) {
        free(b.buf);
        return NULL;
    }
    *len = b.len;
    return b.buf;
}
