/* metrics.h — counters of `tern serve` and their Prometheus text rendering (GET /metrics):
 * requests by route and status, latency histograms by route, segments translated, rejected
 * (queue full) and abandoned (client gone) requests, plus the engine's queue depth, batch sizes
 * and token counts per model. */
#ifndef TERN_SERVE_METRICS_H
#define TERN_SERVE_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "serve/engine.h"

typedef enum {
    R_PAGE = 0, R_TRANSLATE, R_LANGUAGES, R_V1_TRANSLATE, R_V1_SCORE, R_V1_MODELS, R_HEALTH, R_METRICS,
    R_OPENAPI, R_SETTINGS, R_DETECT, R_TRANSLATE_FILE, R_DOWNLOAD_FILE, R_OTHER, R_COUNT
} route_t;

#define METRICS_CODES 13
#define METRICS_BUCKETS 14

typedef struct {
    pthread_mutex_t mu;
    uint64_t requests[R_COUNT][METRICS_CODES]; /* by the status codes of metrics.c */
    uint64_t latency[R_COUNT][METRICS_BUCKETS + 1];
    double latency_sum[R_COUNT];
    uint64_t latency_count[R_COUNT];
    uint64_t disconnects[R_COUNT];
    uint64_t rejected;   /* 503: queue full */
    uint64_t segments;   /* segments answered */
} metrics_t;

void metrics_init(metrics_t *m);
void metrics_free(metrics_t *m);
void metrics_request(metrics_t *m, route_t route, int status, double seconds);
void metrics_disconnect(metrics_t *m, route_t route);
void metrics_rejected(metrics_t *m);
void metrics_translated(metrics_t *m, int segments, long tokens);
/* What the server adds: its open connections, connections cut by the watchdog (slow clients),
 * access log lines dropped. */
typedef struct {
    int connections;
    uint64_t slow_closed, log_dropped;
} metrics_extra_t;

/* Renders everything (malloc'd text, *len bytes), the process's own metrics included (resident
 * memory, CPU time, open descriptors, start time, from /proc/self). */
char *metrics_render(metrics_t *m, engine_t *engine, int inflight, const metrics_extra_t *extra, size_t *len);

#endif
