/*
 * server.c — HTTP/1.1 for `tern serve` on libmicrohttpd, one thread per connection.
 *
 * A request's body is gathered (up to max_body, else 413), parsed (JSON, or form-encoded for
 * /translate as LibreTranslate accepts), checked (types, UTF-8, limits, API key, rate), split
 * into segments and submitted to the engine; the connection's thread then waits on the request's
 * eventfd and on the client's socket at once: a client that hangs up cancels its request (the
 * engine drops its waiting segments and discards running ones) and the connection is closed.
 */
#include "serve/server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <utf8proc.h>

#include "base/base.h"
#include "cjson/cJSON.h"
#include "serve/docfile.h"
#include "serve/accesslog.h"
#include "serve/metrics.h"
#include "serve/netaddr.h"
#include "serve/quality.h"
#include "serve/segments.h"
#include "text/langid.h"
#include "serve_assets.h" /* generated: page_html[], openapi_json[] */

/* ------------------------------------------------------------------ keys and rate limits */

typedef struct {
    char key[128];
    int per_minute; /* 0: no limit */
    double tokens, last;
} api_key_t;

typedef struct {
    net_addr_t ip;
    int used;
    double tokens, last;
} ip_bucket_t;

struct server {
    engine_t *engine;
    server_options_t opt;
    struct MHD_Daemon *daemon;
    int port;
    atomic_int inflight;
    atomic_int draining;
    metrics_t metrics;
    api_key_t *keys;
    int n_keys;
    ip_bucket_t *ips; /* [IP_SLOTS] when req_limit > 0 */
    pthread_mutex_t keys_mu;
    /* translated files (/translate_file) waiting in files_dir for GET /download_file/ID.NAME */
    char files_dir[512];
    struct stored_file *files; /* [opt.max_files], oldest first */
    int n_files;
    pthread_mutex_t files_mu;
    /* production (docs/serving.md, "Production") */
    net_cidr_t *trusted; /* --trusted-proxies */
    int n_trusted;
    alog_t *alog;        /* --access-log */
    char *cert_pem, *key_pem;
    atomic_uint_fast64_t next_id; /* request ids */
    unsigned id_prefix;
    char start_error[512]; /* libmicrohttpd's last message while starting (a TLS error) */
    /* the connection watchdog: a request must arrive whole within timeout_s of the connection's
     * start (or of the previous answer on a kept-alive connection), however slowly it trickles */
    pthread_mutex_t watch_mu;
    pthread_cond_t watch_cv;
    struct watch *watches;
    pthread_t watchdog;
    int watchdog_started, watch_stop;
    atomic_uint_fast64_t slow_closed;
    char *openapi; /* openapi.json with this server's limits (NULL: the file as it is) */
};

typedef struct stored_file {
    char id[33];    /* 32 random hex digits: the file's name in files_dir */
    char name[256]; /* the name it is downloaded under */
    doc_kind_t kind;
    double t;       /* when it was stored */
} stored_file_t;


/* A connection, for the watchdog: its socket, since when it waits for a request, and whether a
 * whole request came (then the engine's time does not count). watch_mu held. */
typedef struct watch {
    int fd, busy;
    double since;
    struct watch *prev, *next;
} watch_t;

/* Reads the API keys file into a new set and swaps it in under keys_mu (requests check their key
 * once, under the mutex: one in flight has its answer from the old set); a key kept from the old
 * set keeps its rate bucket. A bad file leaves the old set. */
static tern_status_t load_keys(server_t *s, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return tern_error(TERN_ERR_IO, "%s: cannot open the API keys file", path);
    char line[512];
    int lineno = 0, n_keys = 0;
    api_key_t *keys = NULL;
    tern_status_t st = TERN_OK;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '#' || *p == '\n' || *p == '\r' || !*p) continue;
        char key[256] = "";
        int limit = 0, n = sscanf(p, "%255s %d", key, &limit);
        if (n < 1 || strlen(key) >= sizeof s->keys[0].key || limit < 0 || (!strchr(line, '\n') && !feof(f))) {
            st = tern_error(TERN_ERR_FORMAT, "%s:%d: expected \"KEY [REQUESTS_PER_MINUTE]\"", path, lineno);
            break;
        }
        api_key_t *k = realloc(keys, (size_t)(n_keys + 1) * sizeof *k);
        if (!k) {
            st = tern_error(TERN_ERR_NOMEM, "out of memory");
            break;
        }
        keys = k;
        k = &keys[n_keys++];
        memset(k, 0, sizeof *k);
        snprintf(k->key, sizeof k->key, "%s", key);
        k->per_minute = n == 2 ? limit : 0;
        k->tokens = k->per_minute;
        k->last = time_now();
    }
    if (!st && ferror(f)) st = tern_error(TERN_ERR_IO, "%s: read error", path);
    fclose(f);
    if (st) {
        free(keys);
        return st;
    }
    pthread_mutex_lock(&s->keys_mu);
    for (int i = 0; i < n_keys; i++)
        for (int j = 0; j < s->n_keys; j++)
            if (!strcmp(keys[i].key, s->keys[j].key) && keys[i].per_minute == s->keys[j].per_minute) {
                keys[i].tokens = s->keys[j].tokens;
                keys[i].last = s->keys[j].last;
            }
    api_key_t *old = s->keys;
    s->keys = keys;
    s->n_keys = n_keys;
    pthread_mutex_unlock(&s->keys_mu);
    free(old);
    return TERN_OK;
}

typedef enum { KEY_OK = 0, KEY_INVALID, KEY_MISSING, KEY_LIMITED } key_check_t;

/* One token bucket: per_minute requests of burst, refilled at per_minute / 60 per second.
 * Returns 1 when a request may go (and takes its token). keys_mu held. */
static int bucket_take(double *tokens, double *last, int per_minute) {
    double now = time_now();
    *tokens += (now - *last) * per_minute / 60.0;
    if (*tokens > per_minute) *tokens = per_minute;
    *last = now;
    if (*tokens < 1.0) return 0;
    *tokens -= 1.0;
    return 1;
}

/* Requests without a key, per client address (--req-limit): a table of IP_SLOTS buckets, each
 * address probing IP_PROBE slots; a new address takes a free slot or the one idle longest. */
#define IP_SLOTS 4096
#define IP_PROBE 8
static int ip_take(server_t *s, const net_addr_t *ip) {
    uint32_t hh = 2166136261u; /* FNV-1a */
    for (int i = 0; i < 16; i++) hh = (hh ^ ip->a[i]) * 16777619u;
    unsigned h = hh % IP_SLOTS, pick = h;
    for (unsigned k = 0; k < IP_PROBE; k++) {
        ip_bucket_t *b = &s->ips[(h + k) % IP_SLOTS];
        if (b->used && !memcmp(b->ip.a, ip->a, 16)) return bucket_take(&b->tokens, &b->last, s->opt.req_limit);
        ip_bucket_t *p = &s->ips[pick];
        if (!b->used ? p->used : (p->used && b->last < p->last)) pick = (h + k) % IP_SLOTS;
    }
    ip_bucket_t *b = &s->ips[pick];
    b->used = 1;
    b->ip = *ip;
    b->tokens = s->opt.req_limit;
    b->last = time_now();
    return bucket_take(&b->tokens, &b->last, s->opt.req_limit);
}

static key_check_t check_key(server_t *s, const net_addr_t *client, const char *key, int *limit) {
    *limit = 0;
    key_check_t r = KEY_OK;
    int keyed = 0;
    pthread_mutex_lock(&s->keys_mu);
    if (s->opt.api_keys_file && key && *key) {
        r = KEY_INVALID;
        for (int i = 0; i < s->n_keys; i++) {
            api_key_t *k = &s->keys[i];
            if (strcmp(k->key, key)) continue;
            r = KEY_OK;
            keyed = 1;
            if (k->per_minute > 0 && !bucket_take(&k->tokens, &k->last, k->per_minute)) {
                r = KEY_LIMITED;
                *limit = k->per_minute;
            }
            break;
        }
    } else if (s->opt.api_keys_file && s->opt.require_api_key)
        r = KEY_MISSING;
    if (r == KEY_OK && !keyed && s->opt.req_limit > 0) {
        if (!ip_take(s, client)) {
            r = KEY_LIMITED;
            *limit = s->opt.req_limit;
        }
    }
    pthread_mutex_unlock(&s->keys_mu);
    return r;
}

/* ------------------------------------------------------------------ connections */

typedef struct {
    route_t route;
    int is_post, is_form, after_drain, early_done;
    char *body;
    size_t len, cap;
    int too_large;
    struct MHD_PostProcessor *pp;
    char *form[6]; /* q, source, target, format, api_key, alternatives */
    char *file, *file_name; /* /translate_file: the form's "file" (file_len bytes) and its file name */
    size_t file_len;
    int file_oom;
    double t0, wall; /* time_now() and the epoch's seconds at the headers */
    double answered; /* time_now() when the response was made (add_common_headers); 0 before */
    /* for the access log */
    net_addr_t client; /* the peer, or the client behind a trusted proxy (rate limits, logs) */
    char client_txt[48], method[16], version[16], id[24];
    char *path, *user_agent, *referer;
    int status;
    uint64_t bytes;
} conn_t;

static const char *const form_keys[6] = {"q", "source", "target", "format", "api_key", "alternatives"};
enum { F_Q, F_SOURCE, F_TARGET, F_FORMAT, F_API_KEY, F_ALTERNATIVES };

static void conn_free(conn_t *cx) {
    if (!cx) return;
    if (cx->pp) MHD_destroy_post_processor(cx->pp);
    for (int i = 0; i < 6; i++) free(cx->form[i]);
    free(cx->file);
    free(cx->file_name);
    free(cx->body);
    free(cx->path), free(cx->user_agent), free(cx->referer);
    free(cx);
}

static enum MHD_Result on_form_field(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                                     const char *content_type, const char *transfer_encoding, const char *data,
                                     uint64_t off, size_t size) {
    conn_t *cx = cls;
    if (cx->route == R_TRANSLATE_FILE && !strcmp(key, "file")) { /* the upload: binary, kept with its length */
        if (off == 0 && (cx->file || cx->file_name)) return MHD_YES; /* the first file only */
        if (off == 0) {
            cx->file_name = strdup(filename ? filename : "");
            if (!cx->file_name) return cx->file_oom = 1, MHD_NO;
        }
        if (off != cx->file_len) return MHD_YES;
        char *p = realloc(cx->file, cx->file_len + size + 1);
        if (!p) return cx->file_oom = 1, MHD_NO;
        memcpy(p + cx->file_len, data, size);
        cx->file_len += size;
        p[cx->file_len] = 0;
        cx->file = p;
        return MHD_YES;
    }
    for (int i = 0; i < 6; i++) {
        if (strcmp(key, form_keys[i])) continue;
        if (off == 0 && cx->form[i]) return MHD_YES; /* the first value of a repeated key, as Flask */
        size_t old = cx->form[i] ? strlen(cx->form[i]) : 0;
        if (old != off) return MHD_YES;
        char *p = realloc(cx->form[i], old + size + 1);
        if (!p) return MHD_NO;
        memcpy(p + old, data, size);
        p[old + size] = 0;
        cx->form[i] = p;
        return MHD_YES;
    }
    return MHD_YES;
}

static route_t route_of(const char *url) {
    static const struct {
        const char *url;
        route_t r;
    } table[] = {{"/", R_PAGE},          {"/translate", R_TRANSLATE}, {"/languages", R_LANGUAGES},
                 {"/v1/translate", R_V1_TRANSLATE}, {"/v1/score", R_V1_SCORE},   {"/v1/models", R_V1_MODELS},
                 {"/health", R_HEALTH},   {"/metrics", R_METRICS},     {"/openapi.json", R_OPENAPI},
                 {"/frontend/settings", R_SETTINGS}, {"/detect", R_DETECT}, {"/translate_file", R_TRANSLATE_FILE}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(url, table[i].url)) return table[i].r;
    if (!strncmp(url, "/download_file/", 15)) return R_DOWNLOAD_FILE;
    return R_OTHER;
}

static void add_common_headers(struct MHD_Response *resp, conn_t *cx, int status, size_t len) {
    if (cx) {
        cx->status = status;
        cx->bytes = len;
        cx->answered = time_now();
        if (cx->id[0]) MHD_add_response_header(resp, "X-Request-Id", cx->id);
    }
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST");
    MHD_add_response_header(resp, "Server", "tern/" TERN_VERSION);
}

/* Sends body (taken: freed by MHD) with status; records the request in the metrics. */
static enum MHD_Result send_body(server_t *s, struct MHD_Connection *c, conn_t *cx, int status, char *body,
                                 size_t len, const char *type, int retry_after) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", type);
    add_common_headers(resp, cx, status, len);
    if (retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", retry_after);
        MHD_add_response_header(resp, "Retry-After", v);
    }
    if (atomic_load(&s->draining)) MHD_add_response_header(resp, "Connection", "close");
    enum MHD_Result r = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    metrics_request(&s->metrics, cx ? cx->route : R_OTHER, status, cx ? time_now() - cx->t0 : 0);
    return r;
}

static enum MHD_Result send_static(server_t *s, struct MHD_Connection *c, conn_t *cx, const unsigned char *data,
                                   size_t len, const char *type) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", type);
    add_common_headers(resp, cx, 200, len);
    enum MHD_Result r = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    metrics_request(&s->metrics, cx->route, 200, time_now() - cx->t0);
    return r;
}

static enum MHD_Result send_json(server_t *s, struct MHD_Connection *c, conn_t *cx, int status, cJSON *j,
                                 int retry_after) {
    char *txt = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!txt) return MHD_NO;
    return send_body(s, c, cx, status, txt, strlen(txt), "application/json", retry_after);
}

/* Replaces each byte that does not start a valid UTF-8 sequence by '?' (error messages quote
 * what the client sent -- a language code, a URL -- and may cut a character when truncated; JSON
 * text must be UTF-8). */
static void utf8_sanitize(char *str) {
    utf8proc_uint8_t *p = (utf8proc_uint8_t *)str;
    while (*p) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p, -1, &cp);
        if (k < 0) *p++ = '?';
        else p += k;
    }
}

static enum MHD_Result send_error(server_t *s, struct MHD_Connection *c, conn_t *cx, int status, int retry_after,
                                  const char *fmt, ...) TERN_PRINTF(6, 7);
static enum MHD_Result send_error(server_t *s, struct MHD_Connection *c, conn_t *cx, int status, int retry_after,
                                  const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    utf8_sanitize(msg);
    cJSON *j = cJSON_CreateObject();
    if (!j) return MHD_NO;
    cJSON_AddStringToObject(j, "error", msg);
    return send_json(s, c, cx, status, j, retry_after);
}

/* Checks the request's API key (LibreTranslate's answers: 403 invalid, 400 missing, 429 over the
 * key's rate); 1 with the error sent (*result) when the request is refused. */
static int key_refused(server_t *s, struct MHD_Connection *c, conn_t *cx, const char *api_key,
                       enum MHD_Result *result) {
    int limit;
    switch (check_key(s, &cx->client, api_key, &limit)) {
    case KEY_INVALID: *result = send_error(s, c, cx, 403, 0, "Invalid API key"); return 1;
    case KEY_MISSING:
        *result = send_error(s, c, cx, 400, 0, "Please contact the server operator to get an API key");
        return 1;
    case KEY_LIMITED:
        *result = send_error(s, c, cx, 429, 60 / (limit > 0 ? limit : 1) + 1, "Slowdown: %d per 1 minute", limit);
        return 1;
    case KEY_OK: break;
    }
    return 0;
}


/* ------------------------------------------------------------------ text checks */

/* Code points of a valid UTF-8 string, or -1. */
static long utf8_length(const char *str) {
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)str;
    long n = 0;
    for (;;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p, -1, &cp);
        if (k < 0) return -1;
        if (cp == 0) return n;
        p += k;
        n++;
    }
}

static const char *language_name(const char *code) {
    static const char *const names[][2] = {
        {"en", "English"}, {"de", "German"},  {"fr", "French"},    {"cs", "Czech"},   {"es", "Spanish"},
        {"it", "Italian"}, {"pt", "Portuguese"}, {"nl", "Dutch"},  {"ru", "Russian"}, {"pl", "Polish"},
        {"uk", "Ukrainian"}, {"zh", "Chinese"}, {"ja", "Japanese"}, {"ar", "Arabic"}, {"tr", "Turkish"},
        {"ro", "Romanian"}, {"fi", "Finnish"}, {"et", "Estonian"}, {"lv", "Latvian"}, {"lt", "Lithuanian"},
        {"hi", "Hindi"},   {"ko", "Korean"},  {"sv", "Swedish"},   {"da", "Danish"},  {"hu", "Hungarian"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(names[i][0], code)) return names[i][1];
    return code;
}

/* ---------------- multilingual models (M2M-100/NLLB; docs/serving.md): the languages they list are
 * served as every pair among them, each request carrying its source and target language. */

/* The code the server shows for a model's language code: M2M-100's "__de__" as "de", else as it is. */
static void ml_code(const char *model_code, char *out, size_t n) {
    size_t l = strlen(model_code);
    if (l > 4 && !strncmp(model_code, "__", 2) && !strcmp(model_code + l - 2, "__"))
        snprintf(out, n, "%.*s", (int)(l - 4), model_code + 2);
    else
        snprintf(out, n, "%s", model_code);
}

static int ml_is(const engine_model_t *m) {
    int n;
    engine_model_languages(m, &n);
    return n > 0;
}

/* 1 when multilingual model m has the language code (as the server shows it, or as the model names it). */
static int ml_has(const engine_model_t *m, const char *code) {
    int n;
    const char *const *langs = engine_model_languages(m, &n);
    char c[64];
    for (int i = 0; i < n; i++) {
        ml_code(langs[i], c, sizeof c);
        if (!strcmp(c, code) || !strcmp(langs[i], code)) return 1;
    }
    return 0;
}
/* ---------------- end of multilingual models */

/* Source and target language of a model named "src-tgt" (none for a multilingual model). */
static void model_langs(const engine_model_t *m, char *src, char *tgt, size_t n) {
    const char *name = engine_model_name(m), *dash = strchr(name, '-');
    if (ml_is(m)) {
        src[0] = tgt[0] = 0;
        return;
    }
    if (!dash) {
        snprintf(src, n, "%s", name);
        tgt[0] = 0;
        return;
    }
    snprintf(src, n, "%.*s", (int)(dash - name), name);
    snprintf(tgt, n, "%s", dash + 1);
}

static engine_model_t *find_pair(server_t *s, const char *src, const char *tgt) {
    char a[64], b[64];
    for (int i = 0; i < engine_num_models(s->engine); i++) {
        engine_model_t *m = engine_model_at(s->engine, i);
        model_langs(m, a, b, sizeof a);
        if (a[0] && !strcmp(a, src) && !strcmp(b, tgt)) return m;
    }
    for (int i = 0; i < engine_num_models(s->engine); i++) { /* a multilingual model with both languages */
        engine_model_t *m = engine_model_at(s->engine, i);
        if (ml_is(m) && strcmp(src, tgt) && ml_has(m, src) && ml_has(m, tgt)) return m;
    }
    return NULL;
}

static int lang_known(server_t *s, const char *code, int as_source) {
    char a[64], b[64];
    for (int i = 0; i < engine_num_models(s->engine); i++) {
        engine_model_t *m = engine_model_at(s->engine, i);
        model_langs(m, a, b, sizeof a);
        if (a[0] && (!strcmp(as_source ? a : b, code) || !strcmp(as_source ? b : a, code))) return 1;
        if (ml_is(m) && ml_has(m, code)) return 1;
    }
    return 0;
}

/* The languages of the loaded models (either side), in the order of the models: /languages lists
 * them so, and LibreTranslate's batch detection walks its languages in that order. */
static int server_languages(server_t *s, char codes[][16], int max) {
    int n = 0;
    char a[64], b[64];
    for (int i = 0; i < engine_num_models(s->engine); i++) {
        engine_model_t *m = engine_model_at(s->engine, i);
        model_langs(m, a, b, sizeof a);
        int nl = 0;
        const char *const *langs = engine_model_languages(m, &nl);
        char ml[64];
        for (int k = 0; k < (nl ? nl : 2); k++) {
            if (nl) ml_code(langs[k], ml, sizeof ml);
            const char *code = nl ? ml : k ? b : a;
            int seen = 0;
            for (int j = 0; j < n; j++) seen |= !strcmp(codes[j], code);
            if (!seen && n < max && code[0] && strlen(code) < sizeof codes[0])
                snprintf(codes[n++], sizeof codes[0], "%s", code);
        }
    }
    return n;
}

/* How a request goes from one language to another: leg[0] alone (a model of the pair), or leg[0]
 * into English then leg[1] out of it. */
typedef struct {
    engine_model_t *leg[2];
} pair_route_t;

/* The one place that decides a route (the server's LibreTranslate side uses nothing else): the
 * model of the pair when one is loaded, else through English when src-en and en-tgt both are.
 * 0, or -1 with err worded as LibreTranslate words it. */
static int route_pair(server_t *s, const char *src, const char *tgt, pair_route_t *rt, char *err, size_t n) {
    rt->leg[0] = rt->leg[1] = NULL;
    if (!lang_known(s, src, 1)) return snprintf(err, n, "%s is not supported", src), -1;
    if (!lang_known(s, tgt, 0)) return snprintf(err, n, "%s is not supported", tgt), -1;
    if ((rt->leg[0] = find_pair(s, src, tgt))) return 0;
    if (strcmp(src, "en") && strcmp(tgt, "en") && (rt->leg[0] = find_pair(s, src, "en")) &&
        (rt->leg[1] = find_pair(s, "en", tgt)))
        return 0;
    rt->leg[0] = rt->leg[1] = NULL;
    snprintf(err, n, "%s (%s) is not available as a target language from %s (%s)", language_name(tgt), tgt,
             language_name(src), src);
    return -1;
}

/* ------------------------------------------------------------------ language identification */

#define LT_MAX_CANDS 64

/* A language a text may be in: LibreTranslate's confidence (CLD2's percentage of the text in it)
 * and the characters of the text it came from (which weigh a batch's ranking). */
typedef struct {
    char code[16];
    double confidence;
    long chars;
} lt_cand_t;

/* The candidates of one text, as LibreTranslate's CLD2 detector finds them: CLD2's guesses when
 * it calls them reliable, else its best-effort guesses when those are reliable, else none; the
 * text read as HTML (pycld2's default). Returns the count, or -1 (err: CLD2's error). */
static int detect_one(const char *text, lt_cand_t *out, char *err, size_t en) {
    langid_result_t r;
    size_t len = strlen(text);
    if (langid_detect(&r, text, len, 0, 0) || (!r.reliable && langid_detect(&r, text, len, 1, 0))) {
        snprintf(err, en, "%s", tern_last_error());
        return -1;
    }
    if (!r.reliable) return 0;
    long chars = utf8_length(text);
    for (int i = 0; i < r.n; i++) {
        snprintf(out[i].code, sizeof out[i].code, "%s", r.guess[i].code);
        out[i].confidence = r.guess[i].percent;
        out[i].chars = chars;
    }
    return r.n;
}

/* LibreTranslate's detect_languages(): the candidates of every text that this server has a model
 * for; with a batch (a list), each language once with its mean confidence and summed characters;
 * ranked by confidence x characters (stable); none at all: English with confidence 0. Returns the
 * count (>= 1), or -1 with err. */
static int detect_languages(server_t *s, const char *const *texts, int n, int batch, lt_cand_t *out, char *err,
                            size_t en) {
    lt_cand_t *all = calloc((size_t)n * LANGID_MAX + 1, sizeof *all);
    if (!all) return snprintf(err, en, "out of memory"), -1;
    int k = 0;
    for (int i = 0; i < n; i++) {
        lt_cand_t c[LANGID_MAX];
        int m = detect_one(texts[i], c, err, en);
        if (m < 0) {
            free(all);
            return -1;
        }
        for (int j = 0; j < m; j++)
            if (c[j].chars > 0 && lang_known(s, c[j].code, 1)) all[k++] = c[j];
    }
    if (batch) { /* one per language, in the order of the server's languages */
        char codes[LT_MAX_CANDS][16];
        int nc = server_languages(s, codes, LT_MAX_CANDS), w = 0;
        lt_cand_t *merged = calloc((size_t)nc + 1, sizeof *merged);
        if (!merged) {
            free(all);
            return snprintf(err, en, "out of memory"), -1;
        }
        for (int l = 0; l < nc; l++) {
            int cnt = 0;
            double sum = 0;
            long chars = 0;
            for (int j = 0; j < k; j++)
                if (!strcmp(all[j].code, codes[l])) cnt++, sum += all[j].confidence, chars += all[j].chars;
            if (!cnt) continue;
            merged[w] = (lt_cand_t){.confidence = sum / cnt, .chars = chars};
            snprintf(merged[w].code, sizeof merged[w].code, "%s", codes[l]);
            w++;
        }
        free(all);
        all = merged;
        k = w;
    }
    if (k > LT_MAX_CANDS) k = LT_MAX_CANDS;
    for (int i = 1; i < k; i++) { /* insertion sort: stable, as Python's */
        lt_cand_t x = all[i];
        int j = i;
        while (j > 0 && all[j - 1].confidence * (double)all[j - 1].chars < x.confidence * (double)x.chars) {
            all[j] = all[j - 1];
            j--;
        }
        all[j] = x;
    }
    if (k == 0) {
        out[0] = (lt_cand_t){.code = "en", .confidence = 0.0, .chars = 0};
        k = 1;
    } else memcpy(out, all, (size_t)k * sizeof *out);
    free(all);
    return k;
}

/* ------------------------------------------------------------------ waiting for the engine */

typedef enum { WAIT_DONE = 0, WAIT_GONE } wait_t;

static wait_t wait_request(struct MHD_Connection *c, serve_request_t *r) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int cfd = ci ? ci->connect_fd : -1;
    struct pollfd pf[2] = {{request_fd(r), POLLIN, 0}, {cfd, POLLRDHUP, 0}};
    for (;;) {
        int k = poll(pf, cfd >= 0 ? 2 : 1, -1);
        if (k < 0 && errno == EINTR) continue;
        if (pf[0].revents & POLLIN) return WAIT_DONE;
        if (cfd >= 0 && (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR))) return WAIT_GONE;
        if (k < 0) return WAIT_GONE;
    }
}

/* Submits and waits; on success returns 0 with the request complete. Otherwise the response is
 * sent (or the connection is to be closed: *result MHD_NO) and 1 is returned. */
static int run_request(server_t *s, struct MHD_Connection *c, conn_t *cx, engine_model_t *m, serve_request_t *r,
                       enum MHD_Result *result) {
    if (engine_submit(m, r)) {
        metrics_rejected(&s->metrics);
        *result = send_error(s, c, cx, 503, 1, "Server busy: the translation queue of %s is full, retry later",
                             engine_model_name(m));
        return 1;
    }
    if (wait_request(c, r) == WAIT_GONE) {
        request_cancel(r);
        metrics_disconnect(&s->metrics, cx->route);
        *result = MHD_NO;
        return 1;
    }
    const char *msg;
    tern_status_t st = request_status(r, &msg);
    if (st == TERN_ERR_INVALID_ARG) { /* a search option the model cannot take (sampling_topk over its vocabulary) */
        *result = send_error(s, c, cx, 400, 0, "Invalid request: %s", msg);
        return 1;
    }
    if (st) {
        *result = send_error(s, c, cx, 500, 0, "Cannot translate text: %s", msg);
        return 1;
    }
    return 0;
}

static const char *result_text(void *ctx, int seg, int h) {
    const tern_result_t *res = request_result(ctx, seg);
    return res->num_hypotheses ? res->hypotheses[h < res->num_hypotheses ? h : 0] : NULL;
}

/* ------------------------------------------------------------------ the path both APIs share */

/* Where a request's answer goes; fail() sends an error and returns -1. */
typedef struct {
    server_t *s;
    struct MHD_Connection *c;
    conn_t *cx;
    enum MHD_Result result;
} reply_t;

static int fail(reply_t *rp, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(reply_t *rp, int status, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rp->result = send_error(rp->s, rp->c, rp->cx, status, 0, "%s", msg);
    return -1;
}

/* The texts of a request checked against the server's limits: each valid UTF-8 (names[t] is what
 * an error calls text i of list t: "q[%d]", or "q" for a single text), without a newline when
 * one_line (each item is one segment), and the characters of all within char_limit. texts[1]
 * (scoring's targets) may be NULL. */
static int check_texts(reply_t *rp, const char *const *const texts[2], int n, const char *const names[2], int one_line) {
    long chars = 0;
    for (int t = 0; t < 2 && texts[t]; t++)
        for (int i = 0; i < n; i++) {
            long l = utf8_length(texts[t][i]);
            char name[64];
            snprintf(name, sizeof name, names[t], i);
            if (l < 0) return fail(rp, 400, "Invalid request: %s is not valid UTF-8", name);
            if (one_line && strchr(texts[t][i], '\n'))
                return fail(rp, 400, "Invalid request: %s contains a newline: send one segment per item", name);
            chars += l;
        }
    if (rp->s->opt.char_limit >= 0 && chars > rp->s->opt.char_limit)
        return fail(rp, 400, "Invalid request: request (%ld) exceeds text limit (%d)", chars, rp->s->opt.char_limit);
    return 0;
}

/* Counts the segments' tokens, submits them to m's queue with params and waits; 0 with *out
 * complete, or -1 with the answer sent (or the connection to close). */
static int submit(reply_t *rp, engine_model_t *m, request_kind_t kind, const tern_search_params_t *params, int n,
                  const char *const *segs, const char *const *targets, const char *const langs[2], unsigned want,
                  serve_request_t **out) {
    int *ntok = calloc((size_t)(n > 0 ? n : 1), sizeof *ntok);
    if (!ntok) return fail(rp, 500, "Cannot translate text: out of memory");
    for (int i = 0; i < n; i++)
        if (engine_count_tokens(m, segs[i], &ntok[i])) {
            free(ntok);
            return fail(rp, 500, "Cannot translate text: %s", tern_last_error());
        }
    *out = request_new(kind, params, n, segs, targets, ntok);
    free(ntok);
    if (!*out || (langs && request_set_langs(*out, langs[0], langs[1])) || (want && request_want(*out, want)))
        return fail(rp, 500, "Cannot translate text: out of memory");
    return run_request(rp->s, rp->c, rp->cx, m, *out, &rp->result) ? -1 : 0;
}

/* ------------------------------------------------------------------ LibreTranslate /translate */

/* A /translate request as parsed (strings borrowed from the JSON body or the form). */
typedef struct {
    cJSON *root;
    const char **items;
    int n_items, is_list, alternatives;
    const char *source, *target, *format, *api_key, *single;
    int quality; /* Tern's "quality": true (JSON only): each text's quality estimate */
    char *norm_q;
    lt_cand_t *detected; /* [n_items] for source "auto": each item's language as detected */
} lt_req_t;

/* The body as one JSON value followed by nothing but whitespace; NULL otherwise (*at: the offset
 * of trailing data, 0 for a parse error). */
static cJSON *parse_json(conn_t *cx, long *at) {
    *at = 0;
    if (!cx->body) return NULL;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(cx->body, cx->len, &end, 0);
    if (!j) return NULL; /* (cJSON_GetErrorPtr() is a global: not safe across threads) */
    while (end < cx->body + cx->len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
    if (end != cx->body + cx->len) {
        *at = (long)(end - cx->body);
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static const char *json_str(cJSON *o, const char *key, int *bad) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return NULL;
    if (!cJSON_IsString(v)) {
        *bad = 1;
        return NULL;
    }
    return v->valuestring;
}

/* A list of strings (or one string when allow_single) into a fresh array of borrowed pointers. */
static const char **json_strings(cJSON *v, const char *key, int allow_single, int *n, char *err, size_t en) {
    *n = 0;
    const char **out = NULL;
    if (allow_single && cJSON_IsString(v)) {
        out = malloc(sizeof *out);
        if (out) out[0] = v->valuestring, *n = 1;
        return out;
    }
    if (!cJSON_IsArray(v)) {
        snprintf(err, en, "%s must be %s", key, allow_single ? "a string or a list of strings" : "a list of strings");
        return NULL;
    }
    int k = cJSON_GetArraySize(v), i = 0;
    out = calloc((size_t)(k ? k : 1), sizeof *out);
    if (!out) return NULL;
    cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (!cJSON_IsString(it)) {
            snprintf(err, en, "%s[%d] is not a string", key, i);
            free(out);
            return NULL;
        }
        out[i++] = it->valuestring;
    }
    *n = k;
    return out;
}

/* alternatives, from JSON (a number, or a string as LibreTranslate's int() takes it: its web page
 * sends "2") or a form (a string) */
static int lt_alternatives(reply_t *rp, cJSON *alt, const char *form, lt_req_t *q) {
    int hi = rp->s->opt.max_beam - 1;
    if (alt && cJSON_IsString(alt)) {
        form = alt->valuestring; /* then as a form's value */
        alt = NULL;
    }
    char trimmed[32];
    if (form) { /* as Python's int(): surrounding white space allowed, then digits (no sign: never negative) */
        while (*form == ' ' || *form == '\t' || *form == '\n' || *form == '\r') form++;
        size_t k = strlen(form);
        while (k && (form[k - 1] == ' ' || form[k - 1] == '\t' || form[k - 1] == '\n' || form[k - 1] == '\r')) k--;
        if (k == 0 || k >= sizeof trimmed)
            return fail(rp, 400, "Invalid request: alternatives must be an integer in 0..%d", hi);
        memcpy(trimmed, form, k);
        trimmed[k] = 0;
        for (size_t i = 0; i < k; i++) /* digits only: no sign (a count is never negative) */
            if (trimmed[i] < '0' || trimmed[i] > '9')
                return fail(rp, 400, "Invalid request: alternatives must be an integer in 0..%d", hi);
        form = trimmed;
    }
    char *e = NULL;
    long a = form ? strtol(form, &e, 10) : 0;
    if (alt && (!cJSON_IsNumber(alt) || alt->valuedouble != floor(alt->valuedouble) || alt->valuedouble < 0 ||
                alt->valuedouble > hi))
        return fail(rp, 400, "Invalid request: alternatives must be an integer in 0..%d", hi);
    if (form && (*e || a < 0 || a > hi))
        return fail(rp, 400, "Invalid request: alternatives must be an integer in 0..%d", hi);
    q->alternatives = alt ? (int)alt->valuedouble : (int)a;
    return 0;
}

static int lt_parse_json(reply_t *rp, lt_req_t *q) {
    long at = 0;
    if (!rp->cx->body) return fail(rp, 400, "Invalid JSON format");
    if (!(q->root = parse_json(rp->cx, &at))) {
        if (at) return fail(rp, 400, "Invalid JSON format: trailing data at byte %ld", at);
        return fail(rp, 400, "Invalid JSON format");
    }
    if (!cJSON_IsObject(q->root)) return fail(rp, 400, "Invalid JSON format");
    int bad_type = 0;
    q->api_key = json_str(q->root, "api_key", &bad_type);
    cJSON *v = cJSON_GetObjectItemCaseSensitive(q->root, "q");
    char err[256] = "";
    if (cJSON_IsString(v)) q->single = v->valuestring;
    else if (cJSON_IsArray(v)) {
        q->is_list = 1;
        if (!(q->items = json_strings(v, "q", 0, &q->n_items, err, sizeof err))) {
            if (!err[0]) return fail(rp, 500, "Cannot translate text: out of memory");
            return fail(rp, 400, "Invalid request: %s", err);
        }
    } else if (v && !cJSON_IsNull(v)) {
        return fail(rp, 400, "Invalid request: q must be a string or a list of strings");
    }
    q->source = json_str(q->root, "source", &bad_type);
    q->target = json_str(q->root, "target", &bad_type);
    q->format = json_str(q->root, "format", &bad_type);
    cJSON *alt = cJSON_GetObjectItemCaseSensitive(q->root, "alternatives");
    if (alt && !cJSON_IsNull(alt) && lt_alternatives(rp, alt, NULL, q)) return -1;
    cJSON *qual = cJSON_GetObjectItemCaseSensitive(q->root, "quality");
    if (qual && !cJSON_IsNull(qual) && !cJSON_IsBool(qual))
        return fail(rp, 400, "Invalid request: quality must be true or false");
    q->quality = cJSON_IsTrue(qual);
    if (bad_type)
        return fail(rp, 400, "Invalid request: source, target, format and api_key must be strings");
    return 0;
}

/* form values, then the query string (Flask's request.values) */
static int lt_parse_form(reply_t *rp, lt_req_t *q) {
    const char *vals[6];
    for (int i = 0; i < 6; i++) {
        vals[i] = rp->cx->form[i];
        if (!vals[i]) vals[i] = MHD_lookup_connection_value(rp->c, MHD_GET_ARGUMENT_KIND, form_keys[i]);
    }
    q->api_key = vals[F_API_KEY];
    q->source = vals[F_SOURCE];
    q->target = vals[F_TARGET];
    q->format = vals[F_FORMAT];
    if (vals[F_ALTERNATIVES] && *vals[F_ALTERNATIVES] && lt_alternatives(rp, NULL, vals[F_ALTERNATIVES], q)) return -1;
    if (vals[F_Q]) { /* line endings normalized to LF, as LibreTranslate does for forms */
        if (!(q->norm_q = malloc(strlen(vals[F_Q]) + 1))) return fail(rp, 500, "Cannot translate text: out of memory");
        char *d = q->norm_q;
        for (const char *p = vals[F_Q]; *p; p++) {
            if (*p == '\r') {
                *d++ = '\n';
                if (p[1] == '\n') p++;
            } else *d++ = *p;
        }
        *d = 0;
        q->single = q->norm_q;
    }
    return 0;
}

/* Required fields, limits and texts; a single q becomes a list of one. */
static int lt_validate(reply_t *rp, lt_req_t *q) {
    const server_options_t *o = &rp->s->opt;
    if ((!q->is_list && (!q->single || !*q->single)) || (q->is_list && q->n_items == 0))
        return fail(rp, 400, "Invalid request: missing q parameter");
    if (!q->source || !*q->source) return fail(rp, 400, "Invalid request: missing source parameter");
    if (!q->target || !*q->target) return fail(rp, 400, "Invalid request: missing target parameter");
    if (q->is_list && o->batch_limit >= 0 && q->n_items > o->batch_limit)
        return fail(rp, 400, "Invalid request: request (%d) exceeds text limit (%d)", q->n_items, o->batch_limit);
    if (!q->is_list) {
        if (!(q->items = calloc(1, sizeof *q->items))) return fail(rp, 500, "Cannot translate text: out of memory");
        q->items[0] = q->single;
        q->n_items = 1;
    }
    const char *const *texts[2] = {q->items, NULL}, *names[2] = {q->is_list ? "q[%d]" : "q", NULL};
    return check_texts(rp, texts, q->n_items, names, 0);
}

/* The format ("text" when absent). */
static int lt_format(reply_t *rp, lt_req_t *q) {
    if (!q->format || !*q->format) q->format = "text";
    if (strcmp(q->format, "text") && strcmp(q->format, "html"))
        return fail(rp, 400, "%s format is not supported", q->format);
    return 0;
}

/* The items of source language src cut into segments (the text of HTML; its sentences, as
 * LibreTranslate splits them, unless --no-split-sentences) within the segment limit, counting the
 * *used segments of the request's other groups. */
static int lt_segments(reply_t *rp, lt_req_t *q, const char *src, const char *const *items, int n, segments_t *g,
                       int *used) {
    if (segments_build(g, items, n, !strcmp(q->format, "html"), rp->s->opt.split_sentences ? src : NULL))
        return fail(rp, 500, "Cannot translate text: out of memory");
    *used += g->n;
    if (*used > rp->s->opt.max_segments)
        return fail(rp, 400, "Invalid request: request (%d segments) exceeds segment limit (%d)", *used,
                    rp->s->opt.max_segments);
    return 0;
}

/* Items of one source language, and the route that takes them to the target. */
typedef struct {
    const char *src;        /* borrowed from the request */
    pair_route_t route;
    const char **items;     /* [n] texts (borrowed) */
    int n;
    segments_t g;
    serve_request_t *r[2];  /* one request per leg: all of the group's segments, batched */
} lt_group_t;

/* The request's items grouped by source language (one group unless "auto" found several), each
 * group routed; groups[i] in order of first appearance, item_group/item_pos: where item i went. */
typedef struct {
    lt_group_t *groups;
    int n_groups;
    int *item_group, *item_pos;
} lt_plan_t;

static void lt_plan_free(lt_plan_t *pl) {
    for (int k = 0; k < pl->n_groups; k++) {
        request_release(pl->groups[k].r[0]);
        request_release(pl->groups[k].r[1]);
        segments_free(&pl->groups[k].g);
        free(pl->groups[k].items);
    }
    free(pl->groups);
    free(pl->item_group);
    free(pl->item_pos);
}

/* Each item's source: the given one, or for "auto" as LibreTranslate does: an item of more than
 * 40 characters by its own detection, a shorter one by the detection of the whole request. */
static int lt_detect_sources(reply_t *rp, lt_req_t *q) {
    if (strcmp(q->source, "auto")) return 0;
    if (!(q->detected = calloc((size_t)q->n_items, sizeof *q->detected)))
        return fail(rp, 500, "Cannot translate text: out of memory");
    lt_cand_t overall[LT_MAX_CANDS], own[LT_MAX_CANDS];
    char err[256];
    if (detect_languages(rp->s, q->items, q->n_items, q->is_list, overall, err, sizeof err) < 0)
        return fail(rp, 500, "Cannot detect language: %s", err);
    for (int i = 0; i < q->n_items; i++) {
        const lt_cand_t *c = overall;
        if (utf8_length(q->items[i]) > 40) {
            if (detect_languages(rp->s, &q->items[i], 1, 0, own, err, sizeof err) < 0)
                return fail(rp, 500, "Cannot detect language: %s", err);
            c = own;
        }
        q->detected[i] = c[0];
    }
    return 0;
}

/* Groups the items by source and routes each group (an unknown language or an unreachable pair:
 * 400 naming it). */
static int lt_plan(reply_t *rp, lt_req_t *q, lt_plan_t *pl) {
    pl->groups = calloc((size_t)q->n_items, sizeof *pl->groups);
    pl->item_group = calloc((size_t)q->n_items, sizeof *pl->item_group);
    pl->item_pos = calloc((size_t)q->n_items, sizeof *pl->item_pos);
    if (!pl->groups || !pl->item_group || !pl->item_pos) return fail(rp, 500, "Cannot translate text: out of memory");
    for (int i = 0; i < q->n_items; i++) {
        const char *src = q->detected ? q->detected[i].code : q->source;
        int k = 0;
        while (k < pl->n_groups && strcmp(pl->groups[k].src, src)) k++;
        if (k == pl->n_groups) {
            lt_group_t *gr = &pl->groups[pl->n_groups++];
            gr->src = src;
            char err[1024]; /* fail()'s length */
            if (route_pair(rp->s, src, q->target, &gr->route, err, sizeof err)) return fail(rp, 400, "%s", err);
            if (!(gr->items = calloc((size_t)q->n_items, sizeof *gr->items)))
                return fail(rp, 500, "Cannot translate text: out of memory");
        }
        pl->item_group[i] = k;
        pl->item_pos[i] = pl->groups[k].n;
        pl->groups[k].items[pl->groups[k].n++] = q->items[i];
    }
    return 0;
}

/* A model's parameters with the n-best LibreTranslate's alternatives ask for. */
static tern_search_params_t lt_params(engine_model_t *m, int alternatives) {
    tern_search_params_t p = engine_model_params(m);
    if (alternatives > 0) {
        p.num_hypotheses = alternatives + 1;
        if (p.beam_size < p.num_hypotheses) p.beam_size = p.num_hypotheses;
    }
    return p;
}

/* Translates a group along its route: every segment in one request to the first model; through
 * English, the best translation of each into one request to the second (the alternatives are the
 * second leg's n-best of the first leg's best). */
static int lt_run_group(reply_t *rp, lt_req_t *q, lt_group_t *gr) {
    engine_model_t *m0 = gr->route.leg[0], *m1 = gr->route.leg[1];
    tern_search_params_t p0 = lt_params(m0, m1 ? 0 : q->alternatives);
    /* a multilingual model's leg gets its languages: src -> target, or src -> en -> target */
    const char *l0[2] = {gr->src, m1 ? "en" : q->target}, *l1[2] = {"en", q->target};
    unsigned want0 = q->quality && !m1 ? REQ_WANT_TOKEN_SCORES : 0; /* the final leg's */
    for (int i = 0; !m1 && gr->g.n_tags && i < gr->g.n; i++) /* inline tags: placed by the attention */
        if (gr->g.n_tags[i] > 0) want0 |= REQ_WANT_TOKEN_SCORES | REQ_WANT_ATTENTION;
    if (submit(rp, m0, REQ_TRANSLATE, &p0, gr->g.n, (const char *const *)gr->g.seg, NULL, ml_is(m0) ? l0 : NULL,
               want0, &gr->r[0]))
        return -1;
    metrics_translated(&rp->s->metrics, gr->g.n, 0);
    if (!m1) return 0;
    const char **mid = calloc((size_t)(gr->g.n ? gr->g.n : 1), sizeof *mid);
    if (!mid) return fail(rp, 500, "Cannot translate text: out of memory");
    for (int i = 0; i < gr->g.n; i++) {
        const char *t = result_text(gr->r[0], i, 0);
        mid[i] = t ? t : "";
    }
    tern_search_params_t p1 = lt_params(m1, q->alternatives);
    int rc = submit(rp, m1, REQ_TRANSLATE, &p1, gr->g.n, mid, NULL, ml_is(m1) ? l1 : NULL,
                    q->quality ? REQ_WANT_TOKEN_SCORES : 0, &gr->r[1]);
    free(mid);
    if (!rc) metrics_translated(&rp->s->metrics, gr->g.n, 0);
    return rc;
}

static cJSON *cand_json(const lt_cand_t *c) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "confidence", c->confidence);
    cJSON_AddStringToObject(d, "language", c->code);
    return d;
}

/* "quality": an item's estimate, the mean token log-probability over all of its segments' tokens
 * (each segment's best translation, end tokens included: the sum of their log-probabilities over
 * their number); null for an item without any segment (nothing translated). */
static cJSON *lt_quality(const lt_group_t *gr, int item, serve_request_t *last) {
    double sum = 0;
    long tokens = 0;
    int first = gr->g.item_first[item], np = gr->g.item_count[item];
    for (int k = 0; k < np; k++) {
        int seg = gr->g.parts[first + k].seg;
        const tern_token_scores_t *ts = seg >= 0 ? request_token_scores(last, seg) : NULL;
        for (int t = 0; ts && t < ts->num_tokens; t++) sum += ts->log_probs[t];
        tokens += ts ? ts->num_tokens : 0;
    }
    return tokens ? cJSON_CreateNumber(sum / (double)tokens) : cJSON_CreateNull();
}

/* HTML inline tags (serve/tags.h): a segment's best translation gets its tags through the
 * attention of its (direct) translation; other hypotheses, and translations through English, by
 * the proportional rule. */
typedef struct {
    const lt_group_t *gr;
    serve_request_t *last;
} lt_render_t;

static char *lt_render_tags(void *ctx, int seg, int h, const seg_tag_t *tags, int n_tags) {
    const lt_render_t *c = ctx;
    const char *hyp = result_text(c->last, seg, h);
    const tern_attention_t *att = request_attention(c->last, seg);
    const tern_token_scores_t *ts = request_token_scores(c->last, seg);
    char **src = NULL;
    int n_src = 0;
    tag_alignment_t al;
    int aligned = h == 0 && att && ts && att->num_hypotheses > 0 && att->weights && att->weights[0] &&
                  engine_source_pieces(c->gr->route.leg[0], c->gr->g.seg[seg], &src, &n_src) == TERN_OK;
    if (aligned) {
        al = (tag_alignment_t){(const char *const *)src, n_src, (const char *const *)ts->tokens, ts->num_tokens,
                               att->weights[0], att->target_lengths[0], att->source_length};
        if (ts->num_tokens - 1 != att->target_lengths[0]) aligned = 0; /* not the same tokens: no alignment */
    }
    char *out = tags_project(c->gr->g.seg[seg], hyp, tags, n_tags, aligned ? &al : NULL);
    engine_pieces_free(src, n_src);
    return out;
}

static const char *lt_text(void *ctx, int seg, int h) { return result_text(((const lt_render_t *)ctx)->last, seg, h); }

/* Item i with its segments' hypotheses h in place (malloc'd; NULL: out of memory). */
static char *lt_item_text(const lt_plan_t *pl, int i, int h) {
    const lt_group_t *gr = &pl->groups[pl->item_group[i]];
    serve_request_t *last = gr->r[1] ? gr->r[1] : gr->r[0];
    lt_render_t rc = {gr, last};
    return gr->r[1] ? segments_join(&gr->g, pl->item_pos[i], h, result_text, last)
                    : segments_join_tags(&gr->g, pl->item_pos[i], h, lt_text, lt_render_tags, &rc);
}

/* Each item with its segments' translations in place; hypothesis h of a segment (its best when it
 * has fewer); detectedLanguage for "auto". */
static cJSON *lt_render(const lt_req_t *q, const lt_plan_t *pl) {
    int n_out = 1 + q->alternatives;
    cJSON *resp = cJSON_CreateObject(), *texts = q->is_list ? cJSON_CreateArray() : NULL,
          *alts = q->alternatives ? cJSON_CreateArray() : NULL, *quals = q->quality && q->is_list ? cJSON_CreateArray() : NULL;
    for (int i = 0; i < q->n_items; i++) {
        const lt_group_t *gr = &pl->groups[pl->item_group[i]];
        serve_request_t *last = gr->r[1] ? gr->r[1] : gr->r[0];
        if (q->quality) {
            cJSON *qv = lt_quality(gr, pl->item_pos[i], last);
            if (quals) cJSON_AddItemToArray(quals, qv);
            else cJSON_AddItemToObject(resp, "quality", qv);
        }
        cJSON *item_alts = q->alternatives && q->is_list ? cJSON_CreateArray() : alts;
        for (int h = 0; h < n_out; h++) {
            char *txt = lt_item_text(pl, i, h);
            if (!txt) continue;
            if (h == 0) {
                if (q->is_list) cJSON_AddItemToArray(texts, cJSON_CreateString(txt));
                else cJSON_AddStringToObject(resp, "translatedText", txt);
            } else cJSON_AddItemToArray(item_alts, cJSON_CreateString(txt));
            free(txt);
        }
        if (q->alternatives && q->is_list) cJSON_AddItemToArray(alts, item_alts);
    }
    if (q->is_list) cJSON_AddItemToObject(resp, "translatedText", texts);
    if (alts) cJSON_AddItemToObject(resp, "alternatives", alts);
    if (quals) cJSON_AddItemToObject(resp, "quality", quals);
    if (q->detected) {
        if (q->is_list) {
            cJSON *arr = cJSON_CreateArray();
            for (int i = 0; i < q->n_items; i++) cJSON_AddItemToArray(arr, cand_json(&q->detected[i]));
            cJSON_AddItemToObject(resp, "detectedLanguage", arr);
        } else cJSON_AddItemToObject(resp, "detectedLanguage", cand_json(&q->detected[0]));
    }
    return resp;
}

/* parse -> validate -> detect -> route -> submit (per group, per leg) -> render */
static enum MHD_Result handle_translate(server_t *s, struct MHD_Connection *c, conn_t *cx) {
    reply_t rp = {s, c, cx, MHD_NO};
    lt_req_t q;
    memset(&q, 0, sizeof q);
    lt_plan_t pl;
    memset(&pl, 0, sizeof pl);
    if ((cx->is_form ? lt_parse_form(&rp, &q) : lt_parse_json(&rp, &q)) == 0 &&
        !key_refused(s, c, cx, q.api_key, &rp.result) && lt_validate(&rp, &q) == 0 && lt_format(&rp, &q) == 0 &&
        lt_detect_sources(&rp, &q) == 0 && lt_plan(&rp, &q, &pl) == 0) {
        int used = 0, ok = 1;
        for (int k = 0; ok && k < pl.n_groups; k++)
            ok = lt_segments(&rp, &q, pl.groups[k].src, pl.groups[k].items, pl.groups[k].n, &pl.groups[k].g,
                             &used) == 0;
        for (int k = 0; ok && k < pl.n_groups; k++) ok = lt_run_group(&rp, &q, &pl.groups[k]) == 0;
        if (ok) rp.result = send_json(s, c, cx, 200, lt_render(&q, &pl), 0);
    }
    lt_plan_free(&pl);
    free(q.detected);
    free(q.items);
    free(q.norm_q);
    cJSON_Delete(q.root);
    return rp.result;
}

/* ------------------------------------------------------------------ LibreTranslate /translate_file */

/* The directory of translated files: a fresh one under $TMPDIR (or /tmp), removed by server_stop(). */
static tern_status_t files_init(server_t *s) {
    const char *tmp = getenv("TMPDIR");
    snprintf(s->files_dir, sizeof s->files_dir, "%s/tern-serve-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(s->files_dir)) {
        s->files_dir[0] = 0;
        return tern_error(TERN_ERR_IO, "cannot create a directory for translated files under %s: %s",
                          tmp && *tmp ? tmp : "/tmp", strerror(errno));
    }
    if (s->opt.max_files < 1) s->opt.max_files = 1;
    if (!(s->files = calloc((size_t)s->opt.max_files, sizeof *s->files)))
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    return TERN_OK;
}

static void file_path(const server_t *s, const char *id, char *path, size_t n) {
    snprintf(path, n, "%s/%s", s->files_dir, id);
}

/* Drops stored file k (files_mu held). */
static void files_drop(server_t *s, int k) {
    char path[600];
    file_path(s, s->files[k].id, path, sizeof path);
    unlink(path);
    memmove(&s->files[k], &s->files[k + 1], (size_t)(s->n_files - k - 1) * sizeof *s->files);
    s->n_files--;
}

/* Drops the files older than the lifetime (files_mu held). */
static void files_expire(server_t *s) {
    double now = time_now();
    while (s->n_files > 0 && now - s->files[0].t > s->opt.file_lifetime_s) files_drop(s, 0);
}

static void files_remove_all(server_t *s) {
    if (!s->files_dir[0]) return;
    if (s->files)
        while (s->n_files > 0) files_drop(s, 0);
    rmdir(s->files_dir);
    free(s->files);
    s->files = NULL;
}

/* Keeps data under a fresh id (the oldest file goes when there are max_files); 0, or -1. */
static int files_put(server_t *s, const char *name, doc_kind_t kind, const char *data, size_t len, char id[33]) {
    unsigned char rnd[16];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t k = read(fd, rnd, sizeof rnd);
    close(fd);
    if (k != (ssize_t)sizeof rnd) return -1;
    for (int i = 0; i < 16; i++) snprintf(id + 2 * i, 3, "%02x", rnd[i]);
    char path[600];
    file_path(s, id, path, sizeof path);
    FILE *f = fopen(path, "wbx");
    if (!f) return -1;
    int bad = fwrite(data, 1, len, f) != len;
    if (fclose(f) || bad) {
        unlink(path);
        return -1;
    }
    pthread_mutex_lock(&s->files_mu);
    files_expire(s);
    if (s->n_files == s->opt.max_files) files_drop(s, 0);
    stored_file_t *sf = &s->files[s->n_files++];
    memcpy(sf->id, id, 33);
    snprintf(sf->name, sizeof sf->name, "%s", name);
    sf->kind = kind;
    sf->t = time_now();
    pthread_mutex_unlock(&s->files_mu);
    return 0;
}

/* A file name as werkzeug's secure_filename() makes it (LibreTranslate's): its last path
 * component, ASCII letters, digits, '.', '-' and '_' kept, white space runs made '_', the rest
 * dropped, no leading dots; "file" + the extension when nothing is left. */
static void safe_name(const char *in, const char *ext, char *out, size_t n) {
    const char *b = in;
    for (const char *p = in; *p; p++)
        if (*p == '/' || *p == '\\') b = p + 1;
    size_t k = 0;
    int space = 0;
    for (const char *p = b; *p && k + 1 < n; p++) {
        char ch = *p;
        if (ch == ' ' || ch == '\t') {
            space = 1;
            continue;
        }
        if (space && k) out[k++] = '_';
        space = 0;
        if (k + 1 >= n) break;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
            ch == '_' || (ch == '.' && k))
            out[k++] = ch;
    }
    out[k] = 0;
    if (doc_kind_of(out) < 0) snprintf(out, n, "file%s", ext);
}

/* LibreTranslate's POST /translate_file: multipart/form-data with file, source (a code or "auto"),
 * target and api_key; the document's items translated as /translate translates a list of texts
 * (format text or html, docfile.h); {"translatedFileUrl": "http://HOST/download_file/ID.NAME"}. */
static enum MHD_Result handle_translate_file(server_t *s, struct MHD_Connection *c, conn_t *cx) {
    reply_t rp = {s, c, cx, MHD_NO};
    lt_req_t q;
    memset(&q, 0, sizeof q);
    lt_plan_t pl;
    memset(&pl, 0, sizeof pl);
    doc_t *d = NULL;
    char *out = NULL;
    size_t out_len = 0;
    const char *vals[6];
    for (int i = 0; i < 6; i++) {
        vals[i] = cx->form[i];
        if (!vals[i]) vals[i] = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, form_keys[i]);
    }
    q.source = vals[F_SOURCE];
    q.target = vals[F_TARGET];
    q.api_key = vals[F_API_KEY];
    q.is_list = 1;
    if (key_refused(s, c, cx, q.api_key, &rp.result)) goto done;
    if (!cx->file_name) {
        fail(&rp, 400, "Invalid request: missing file parameter (multipart/form-data with a file field)");
        goto done;
    }
    if (!q.source || !*q.source) {
        fail(&rp, 400, "Invalid request: missing source parameter");
        goto done;
    }
    if (!q.target || !*q.target) {
        fail(&rp, 400, "Invalid request: missing target parameter");
        goto done;
    }
    if (!cx->file_name[0]) {
        fail(&rp, 400, "Invalid request: the file field has no file name (send it as a file upload)");
        goto done;
    }
    char name[256];
    int kind = doc_kind_of(cx->file_name);
    if (kind < 0) {
        fail(&rp, 400, "Invalid request: %.200s: unsupported file format (supported: .txt, .html, .docx, .odt)",
             cx->file_name);
        goto done;
    }
    safe_name(cx->file_name, doc_formats[kind], name, sizeof name);
    doc_limits_t lim = {s->opt.max_unzipped, s->opt.max_zip_entries};
    char err[512];
    int st = doc_open(&d, (doc_kind_t)kind, cx->file ? cx->file : "", cx->file_len, &lim, err, sizeof err);
    if (st) {
        fail(&rp, st, st == 500 ? "Cannot translate file: %.200s: %s" : "Invalid request: %.200s: %s", cx->file_name,
             err);
        goto done;
    }
    if (s->opt.char_limit >= 0 && doc_chars(d) > s->opt.char_limit) {
        fail(&rp, 400, "Invalid request: %.200s: its text (%ld characters) exceeds text limit (%d)", cx->file_name,
             doc_chars(d), s->opt.char_limit);
        goto done;
    }
    q.n_items = doc_num_items(d);
    q.format = doc_items_html(d) ? "html" : "text";
    if (q.n_items > 0) {
        if (!(q.items = calloc((size_t)q.n_items, sizeof *q.items))) {
            fail(&rp, 500, "Cannot translate file: out of memory");
            goto done;
        }
        for (int i = 0; i < q.n_items; i++) q.items[i] = doc_item(d, i);
        if (lt_detect_sources(&rp, &q) || lt_plan(&rp, &q, &pl)) goto done;
        int used = 0;
        for (int k = 0; k < pl.n_groups; k++)
            if (lt_segments(&rp, &q, pl.groups[k].src, pl.groups[k].items, pl.groups[k].n, &pl.groups[k].g, &used))
                goto done;
        for (int k = 0; k < pl.n_groups; k++)
            if (lt_run_group(&rp, &q, &pl.groups[k])) goto done;
        for (int i = 0; i < q.n_items; i++) {
            char *t = lt_item_text(&pl, i, 0);
            int bad = !t || doc_set(d, i, t);
            free(t);
            if (bad) {
                fail(&rp, 500, "Cannot translate file: out of memory");
                goto done;
            }
        }
    }
    if (doc_write(d, &out, &out_len, err, sizeof err)) {
        fail(&rp, 500, "Cannot translate file: %s", err);
        goto done;
    }
    char id[33];
    if (files_put(s, name, (doc_kind_t)kind, out, out_len, id)) {
        fail(&rp, 500, "Cannot translate file: cannot store the translated file in %s", s->files_dir);
        goto done;
    }
    /* the URL as the client reached us (LibreTranslate's url_for(_external=True): the Host header) */
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    char hostbuf[300], url[1024];
    if (!host || !*host || strpbrk(host, " /\\\"<>")) {
        snprintf(hostbuf, sizeof hostbuf, "%s:%d", s->opt.host, s->port);
        host = hostbuf;
    }
    snprintf(url, sizeof url, "http://%.300s/download_file/%s.%s", host, id, name);
    cJSON *j = cJSON_CreateObject();
    if (!j) {
        rp.result = MHD_NO;
        goto done;
    }
    cJSON_AddStringToObject(j, "translatedFileUrl", url);
    rp.result = send_json(s, c, cx, 200, j, 0);
done:
    lt_plan_free(&pl);
    free(q.detected);
    free(q.items);
    free(out);
    doc_free(d);
    return rp.result;
}

/* GET /download_file/ID.NAME: a translated file, while it is kept (404 otherwise). */
static enum MHD_Result handle_download(server_t *s, struct MHD_Connection *c, conn_t *cx, const char *url) {
    const char *rest = url + 15;
    const char *dot = strchr(rest, '.');
    char path[600], name[256];
    doc_kind_t kind = DOC_TXT;
    int found = 0;
    if (dot && dot - rest == 32) {
        pthread_mutex_lock(&s->files_mu);
        files_expire(s);
        for (int k = 0; k < s->n_files && !found; k++)
            if (!strncmp(s->files[k].id, rest, 32) && !strcmp(s->files[k].name, dot + 1)) {
                found = 1;
                kind = s->files[k].kind;
                snprintf(name, sizeof name, "%s", s->files[k].name);
                file_path(s, s->files[k].id, path, sizeof path);
            }
        pthread_mutex_unlock(&s->files_mu);
    }
    char *data = NULL;
    size_t len = 0;
    if (found) {
        FILE *f = fopen(path, "rb");
        struct stat sb;
        if (f && !fstat(fileno(f), &sb) && (data = malloc((size_t)sb.st_size + 1)) &&
            fread(data, 1, (size_t)sb.st_size, f) == (size_t)sb.st_size)
            len = (size_t)sb.st_size;
        else {
            free(data);
            data = NULL;
            found = 0;
        }
        if (f) fclose(f);
    }
    if (!found) return send_error(s, c, cx, 404, 0, "Not Found: %s (no such translated file, or it expired)", url);
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(data);
        return MHD_NO;
    }
    char disp[400];
    snprintf(disp, sizeof disp, "attachment; filename=\"%s\"", name); /* safe_name(): no quote, no backslash */
    MHD_add_response_header(resp, "Content-Type", doc_content_type(kind));
    MHD_add_response_header(resp, "Content-Disposition", disp);
    add_common_headers(resp, cx, 200, len);
    enum MHD_Result r = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    metrics_request(&s->metrics, cx->route, 200, time_now() - cx->t0);
    return r;
}

/* LibreTranslate's POST /detect: q (a string; a list is detected as one batch) from a JSON body,
 * a form or the query string, and api_key; the ranked candidates. */
static enum MHD_Result handle_detect(server_t *s, struct MHD_Connection *c, conn_t *cx) {
    reply_t rp = {s, c, cx, MHD_NO};
    lt_req_t q;
    memset(&q, 0, sizeof q);
    if ((cx->is_form ? lt_parse_form(&rp, &q) : lt_parse_json(&rp, &q)) == 0 &&
        !key_refused(s, c, cx, q.api_key, &rp.result)) {
        if ((!q.is_list && (!q.single || !*q.single)) || (q.is_list && q.n_items == 0)) {
            fail(&rp, 400, "Invalid request: missing q parameter");
        } else {
            const char *one[1] = {q.single};
            const char *const *texts[2] = {q.is_list ? q.items : one, NULL},
                              *names[2] = {q.is_list ? "q[%d]" : "q", NULL};
            int n = q.is_list ? q.n_items : 1;
            lt_cand_t cand[LT_MAX_CANDS];
            char err[256];
            int k;
            if (check_texts(&rp, texts, n, names, 0) == 0) {
                if ((k = detect_languages(s, texts[0], n, q.is_list, cand, err, sizeof err)) < 0) {
                    fail(&rp, 500, "Cannot detect language: %s", err);
                } else {
                    cJSON *arr = cJSON_CreateArray();
                    for (int i = 0; i < k; i++) cJSON_AddItemToArray(arr, cand_json(&cand[i]));
                    rp.result = send_json(s, c, cx, 200, arr, 0);
                }
            }
        }
    }
    free(q.items);
    free(q.norm_q);
    cJSON_Delete(q.root);
    return rp.result;
}

/* ------------------------------------------------------------------ Tern's /v1 API */

/* The model of a /v1 request: "model", or "source" + "target", or the only one loaded. */
static engine_model_t *v1_model(server_t *s, cJSON *root, char *err, size_t n) {
    int bad = 0;
    const char *name = json_str(root, "model", &bad), *src = json_str(root, "source", &bad),
               *tgt = json_str(root, "target", &bad);
    if (bad) {
        snprintf(err, n, "model, source and target must be strings");
        return NULL;
    }
    engine_model_t *m = NULL;
    if (name) {
        if (!(m = engine_find(s->engine, name))) snprintf(err, n, "no model named %s", name);
    } else if (src || tgt) {
        if (!src || !tgt) snprintf(err, n, "give both source and target (or model)");
        else if (!(m = find_pair(s, src, tgt))) snprintf(err, n, "no model from %s to %s", src, tgt);
    } else if (engine_num_models(s->engine) == 1) m = engine_model_at(s->engine, 0);
    else snprintf(err, n, "several models are loaded: give model (or source and target)");
    return m;
}

static int json_int_field(cJSON *root, const char *key, int lo, int hi, int *out, char *err, size_t n) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi) {
        snprintf(err, n, "%s must be an integer in %d..%d", key, lo, hi);
        return -1;
    }
    *out = (int)v->valuedouble;
    return 0;
}

static int json_float_field(cJSON *root, const char *key, double lo, double hi, float *out, char *err, size_t n) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) {
        snprintf(err, n, "%s must be a number in %g..%g", key, lo, hi);
        return -1;
    }
    *out = (float)v->valuedouble;
    return 0;
}

/* A /v1 request as parsed (strings borrowed from the JSON body). */
typedef struct {
    cJSON *root;
    int score;
    engine_model_t *m;
    const char **items, **targets;
    int n_items;
    int quality; /* "quality": true: each item's quality estimate (serve/quality.h) */
    tern_search_params_t params;
    const char *langs[2]; /* a multilingual model's source_lang, target_lang (v1_langs) */
} v1_req_t;

/* ---------------- multilingual models: /v1/translate's source_lang and target_lang (else source and
 * target), each a language of the model; a model of one pair takes neither. */
static int v1_langs(reply_t *rp, v1_req_t *q) {
    int bad = 0;
    const char *sl = json_str(q->root, "source_lang", &bad), *tl = json_str(q->root, "target_lang", &bad);
    if (bad) return fail(rp, 400, "Invalid request: source_lang and target_lang must be strings");
    const char *name = engine_model_name(q->m);
    if (!ml_is(q->m)) {
        if (sl || tl)
            return fail(rp, 400, "Invalid request: model %s is not multilingual: source_lang and target_lang apply "
                        "to a multilingual model (M2M-100, NLLB)", name);
        return 0;
    }
    if (!sl) sl = json_str(q->root, "source", &bad);
    if (!tl) tl = json_str(q->root, "target", &bad);
    if (!sl || !tl)
        return fail(rp, 400, "Invalid request: model %s is multilingual: give source_lang and target_lang", name);
    if (!ml_has(q->m, sl)) return fail(rp, 400, "Invalid request: source_lang %.64s is not a language of model %s", sl, name);
    if (!ml_has(q->m, tl)) return fail(rp, 400, "Invalid request: target_lang %.64s is not a language of model %s", tl, name);
    q->langs[0] = sl, q->langs[1] = tl;
    return 0;
}
/* ---------------- end of multilingual models */

/* The body: an object of known fields, an accepted key, a model, q (and targets to score). */
static int v1_parse(reply_t *rp, v1_req_t *q) {
    static const char *const known_translate[] = {"model", "source", "target", "q", "api_key", "beam_size",
                                                  "num_hypotheses", "length_penalty", "length_norm",
                                                  "coverage_penalty", "max_decoding_length", "max_length_a",
                                                  "max_length_b", "min_length", "return_scores", "sampling_topk",
                                                  "sampling_topp", "sampling_temperature", "num_samples", "seed",
                                                  "repetition_penalty", "no_repeat_ngram_size", "source_lang",
                                                  "target_lang", "quality", NULL};
    static const char *const known_score[] = {"model", "source", "target", "q", "targets", "api_key", NULL};
    long at = 0;
    char err[512] = "";
    q->root = parse_json(rp->cx, &at);
    if (!q->root || !cJSON_IsObject(q->root)) return fail(rp, 400, "Invalid JSON format: expected an object");
    cJSON *f;
    cJSON_ArrayForEach(f, q->root) {
        const char *const *k = q->score ? known_score : known_translate;
        while (*k && strcmp(*k, f->string)) k++;
        if (!*k) return fail(rp, 400, "Invalid request: unknown field %s", f->string);
    }
    int bad = 0;
    const char *api_key = json_str(q->root, "api_key", &bad);
    if (bad) return fail(rp, 400, "Invalid request: api_key must be a string");
    if (key_refused(rp->s, rp->c, rp->cx, api_key, &rp->result)) return -1;
    if (!(q->m = v1_model(rp->s, q->root, err, sizeof err))) return fail(rp, 400, "Invalid request: %s", err);
    if (!q->score && v1_langs(rp, q)) return -1;
    q->params = engine_model_params(q->m); /* the request's fields go over the model's defaults */
    cJSON *v = cJSON_GetObjectItemCaseSensitive(q->root, "q");
    if (!v) return fail(rp, 400, "Invalid request: missing q parameter");
    if (!(q->items = json_strings(v, "q", !q->score, &q->n_items, err, sizeof err)))
        return fail(rp, 400, "Invalid request: %s", err[0] ? err : "out of memory");
    if (q->n_items == 0) return fail(rp, 400, "Invalid request: missing q parameter");
    if (!q->score) return 0;
    cJSON *t = cJSON_GetObjectItemCaseSensitive(q->root, "targets");
    int n_targets = 0;
    if (!t) return fail(rp, 400, "Invalid request: missing targets parameter");
    if (!(q->targets = json_strings(t, "targets", 0, &n_targets, err, sizeof err)))
        return fail(rp, 400, "Invalid request: %s", err[0] ? err : "out of memory");
    if (n_targets != q->n_items)
        return fail(rp, 400, "Invalid request: %d targets for %d sources", n_targets, q->n_items);
    return 0;
}

/* The search parameters a /v1 translate request gives, within the server's bounds. */
/* The sampling and repetition fields (docs/decoding.md): ranges, then the contradictions
 * tern_search_params_check names. */
static int v1_sampling(reply_t *rp, v1_req_t *q) {
    const server_options_t *o = &rp->s->opt;
    tern_search_params_t *p = &q->params;
    cJSON *root = q->root, *seed = cJSON_GetObjectItemCaseSensitive(root, "seed");
    char err[512];
    if (json_int_field(root, "sampling_topk", 0, 1 << 30, &p->sampling_topk, err, sizeof err) ||
        json_float_field(root, "sampling_topp", -1e30f, 1e30f, &p->sampling_topp, err, sizeof err) ||
        json_float_field(root, "sampling_temperature", -1e30f, 1e30f, &p->sampling_temperature, err, sizeof err) ||
        json_int_field(root, "num_samples", 1, o->max_beam, &p->num_samples, err, sizeof err) ||
        json_float_field(root, "repetition_penalty", -1e30f, 1e30f, &p->repetition_penalty, err, sizeof err) ||
        json_int_field(root, "no_repeat_ngram_size", 0, o->max_decoding_length, &p->no_repeat_ngram_size, err,
                       sizeof err))
        return fail(rp, 400, "Invalid request: %s", err);
    if (seed) {
        double v = cJSON_IsNumber(seed) ? seed->valuedouble : -1;
        if (!(v >= 0 && v <= 9007199254740992.0 && v == (double)(uint64_t)v))
            return fail(rp, 400, "Invalid request: seed must be an integer in 0..2^53");
        p->seed = (uint64_t)v;
    }
    if (p->sampling_topk != 1 && !cJSON_GetObjectItemCaseSensitive(root, "beam_size")) p->beam_size = 1, p->num_hypotheses = 1;
    if (tern_search_params_check(p)) return fail(rp, 400, "Invalid request: %s", tern_last_error());
    return 0;
}

static int v1_params(reply_t *rp, v1_req_t *q) {
    const server_options_t *o = &rp->s->opt;
    tern_search_params_t *p = &q->params;
    cJSON *root = q->root, *ln = cJSON_GetObjectItemCaseSensitive(root, "length_norm"),
          *rs = cJSON_GetObjectItemCaseSensitive(root, "return_scores");
    char err[512];
    if (json_int_field(root, "beam_size", 1, o->max_beam, &p->beam_size, err, sizeof err) ||
        json_int_field(root, "num_hypotheses", 1, o->max_beam, &p->num_hypotheses, err, sizeof err) ||
        json_float_field(root, "length_penalty", 0, 10, &p->length_penalty, err, sizeof err) ||
        json_float_field(root, "coverage_penalty", 0, 10, &p->coverage_penalty, err, sizeof err) ||
        json_int_field(root, "max_decoding_length", 1, o->max_decoding_length, &p->max_decoding_length, err, sizeof err) ||
        json_float_field(root, "max_length_a", 0, 100, &p->max_length_a, err, sizeof err) ||
        json_int_field(root, "max_length_b", 0, o->max_decoding_length, &p->max_length_b, err, sizeof err) ||
        json_int_field(root, "min_length", 0, o->max_decoding_length, &p->min_length, err, sizeof err))
        return fail(rp, 400, "Invalid request: %s", err);
    if (ln) {
        if (cJSON_IsString(ln) && !strcmp(ln->valuestring, "plain")) p->length_norm = TERN_LENPEN_PLAIN;
        else if (cJSON_IsString(ln) && !strcmp(ln->valuestring, "gnmt")) p->length_norm = TERN_LENPEN_GNMT;
        else return fail(rp, 400, "Invalid request: length_norm must be \"plain\" or \"gnmt\"");
    }
    if (rs) {
        if (!cJSON_IsBool(rs)) return fail(rp, 400, "Invalid request: return_scores must be true or false");
        p->return_scores = cJSON_IsTrue(rs);
    }
    cJSON *qual = cJSON_GetObjectItemCaseSensitive(root, "quality");
    if (qual) {
        if (!cJSON_IsBool(qual)) return fail(rp, 400, "Invalid request: quality must be true or false");
        q->quality = cJSON_IsTrue(qual);
    }
    if (p->num_hypotheses > p->beam_size)
        return fail(rp, 400, "Invalid request: num_hypotheses (%d) exceeds beam_size (%d)", p->num_hypotheses,
                    p->beam_size);
    if (p->min_length > p->max_decoding_length)
        return fail(rp, 400, "Invalid request: min_length exceeds max_decoding_length");
    return v1_sampling(rp, q);
}

/* Limits on the number of items, then the texts. */
static int v1_validate(reply_t *rp, v1_req_t *q) {
    const server_options_t *o = &rp->s->opt;
    if (o->batch_limit >= 0 && q->n_items > o->batch_limit)
        return fail(rp, 400, "Invalid request: request (%d) exceeds text limit (%d)", q->n_items, o->batch_limit);
    if (q->n_items > o->max_segments)
        return fail(rp, 400, "Invalid request: request (%d segments) exceeds segment limit (%d)", q->n_items,
                    o->max_segments);
    const char *const *texts[2] = {q->items, q->score ? q->targets : NULL}, *names[2] = {"q[%d]", "targets[%d]"};
    if (check_texts(rp, texts, q->n_items, names, 1)) return -1;
    return q->score ? 0 : v1_params(rp, q);
}

/* An item's "quality": {score, words: [{word, start, end, score}]} of its best hypothesis text. */
static cJSON *v1_quality(const tern_token_scores_t *ts, const char *text) {
    double score;
    quality_word_t *w;
    int nw;
    if (quality_estimate(ts, text, &score, &w, &nw)) return NULL;
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddNumberToObject(o, "score", score);
    for (int k = 0; k < nw; k++) {
        cJSON *x = cJSON_CreateObject();
        char *word = strndup(text + w[k].start, w[k].end - w[k].start);
        cJSON_AddStringToObject(x, "word", word ? word : "");
        free(word);
        cJSON_AddNumberToObject(x, "start", (double)w[k].start);
        cJSON_AddNumberToObject(x, "end", (double)w[k].end);
        cJSON_AddNumberToObject(x, "score", w[k].score);
        cJSON_AddItemToArray(arr, x);
    }
    free(w);
    cJSON_AddItemToObject(o, "words", arr);
    cJSON *toks = cJSON_CreateArray(), *lps = cJSON_CreateArray(); /* what the scores are made of */
    for (int t = 0; ts && t < ts->num_tokens; t++) {
        cJSON_AddItemToArray(toks, cJSON_CreateString(ts->tokens[t]));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(ts->log_probs[t]));
    }
    cJSON_AddItemToObject(o, "tokens", toks);
    cJSON_AddItemToObject(o, "token_log_probs", lps);
    return o;
}

static cJSON *v1_render(const v1_req_t *q, serve_request_t *r) {
    cJSON *resp = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddStringToObject(resp, "model", engine_model_name(q->m));
    for (int i = 0; i < q->n_items; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!q->score) {
            const tern_result_t *res = request_result(r, i);
            cJSON *h = cJSON_CreateArray(), *sc = cJSON_CreateArray();
            for (int k = 0; k < res->num_hypotheses; k++) {
                cJSON_AddItemToArray(h, cJSON_CreateString(res->hypotheses[k]));
                if (res->scores) cJSON_AddItemToArray(sc, cJSON_CreateNumber(res->scores[k]));
            }
            cJSON_AddItemToObject(o, "hypotheses", h);
            if (res->scores) cJSON_AddItemToObject(o, "scores", sc);
            else cJSON_Delete(sc);
            if (q->quality) {
                cJSON *qv = v1_quality(request_token_scores(r, i), res->num_hypotheses ? res->hypotheses[0] : "");
                cJSON_AddItemToObject(o, "quality", qv ? qv : cJSON_CreateNull());
            }
        } else {
            int cnt;
            const float *lp = request_logprobs(r, i, &cnt);
            cJSON *a = cJSON_CreateArray();
            double sum = 0;
            for (int k = 0; k < cnt; k++) {
                cJSON_AddItemToArray(a, cJSON_CreateNumber(lp[k]));
                sum += lp[k];
            }
            cJSON_AddNumberToObject(o, "log_prob", sum);
            cJSON_AddNumberToObject(o, "tokens", cnt);
            cJSON_AddItemToObject(o, "token_log_probs", a);
        }
        cJSON_AddItemToArray(arr, o);
    }
    cJSON_AddItemToObject(resp, q->score ? "scores" : "translations", arr);
    return resp;
}

/* parse -> validate -> submit -> render */
static enum MHD_Result handle_v1(server_t *s, struct MHD_Connection *c, conn_t *cx, int score) {
    reply_t rp = {s, c, cx, MHD_NO};
    v1_req_t q;
    memset(&q, 0, sizeof q);
    q.score = score;
    q.params = engine_default_params(s->engine);
    serve_request_t *r = NULL;
    if (v1_parse(&rp, &q) == 0 && v1_validate(&rp, &q) == 0 &&
        submit(&rp, q.m, score ? REQ_SCORE : REQ_TRANSLATE, &q.params, q.n_items, q.items, q.targets,
               q.langs[0] ? q.langs : NULL, q.quality ? REQ_WANT_TOKEN_SCORES : 0, &r) == 0) {
        metrics_translated(&s->metrics, q.n_items, 0);
        rp.result = send_json(s, c, cx, 200, v1_render(&q, r), 0);
    }
    request_release(r);
    free(q.items), free(q.targets);
    cJSON_Delete(q.root);
    return rp.result;
}

/* ------------------------------------------------------------------ GET endpoints */

/* Every language with the targets it reaches (route_pair: directly, then through English), each
 * in the order of the models. */
static enum MHD_Result handle_languages(server_t *s, struct MHD_Connection *c, conn_t *cx) {
    cJSON *arr = cJSON_CreateArray();
    enum { MAX_LANGS = 1024 }; /* a multilingual model's languages (NLLB: 202) */
    char (*codes)[16] = calloc(MAX_LANGS, sizeof *codes), err[256];
    if (!codes) {
        cJSON_Delete(arr);
        return send_error(s, c, cx, 500, 0, "out of memory");
    }
    int n = server_languages(s, codes, MAX_LANGS);
    pair_route_t rt;
    for (int j = 0; j < n; j++) {
        cJSON *o = cJSON_CreateObject(), *t = cJSON_CreateArray();
        cJSON_AddStringToObject(o, "code", codes[j]);
        cJSON_AddStringToObject(o, "name", language_name(codes[j]));
        for (int pass = 0; pass < 2; pass++) /* the direct targets first, then those through English */
            for (int i = 0; i < n; i++)
                if (i != j && !route_pair(s, codes[j], codes[i], &rt, err, sizeof err) && !!rt.leg[1] == pass)
                    cJSON_AddItemToArray(t, cJSON_CreateString(codes[i]));
        cJSON_AddItemToObject(o, "targets", t);
        cJSON_AddItemToArray(arr, o);
    }
    free(codes);
    return send_json(s, c, cx, 200, arr, 0);
}

/* The default search parameters /v1/models shows. */
static cJSON *params_json(const tern_search_params_t *p) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "beam_size", p->beam_size);
    cJSON_AddNumberToObject(o, "num_hypotheses", p->num_hypotheses);
    cJSON_AddNumberToObject(o, "length_penalty", p->length_penalty);
    cJSON_AddNumberToObject(o, "max_decoding_length", p->max_decoding_length);
    return o;
}

static enum MHD_Result handle_models(server_t *s, struct MHD_Connection *c, conn_t *cx) {
    cJSON *arr = cJSON_CreateArray();
    tern_search_params_t d = engine_default_params(s->engine);
    char a[64], b[64];
    for (int i = 0; i < engine_num_models(s->engine); i++) {
        engine_model_t *m = engine_model_at(s->engine, i);
        model_langs(m, a, b, sizeof a);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", engine_model_name(m));
        cJSON_AddStringToObject(o, "source", a);
        cJSON_AddStringToObject(o, "target", b);
        tern_search_params_t md = engine_model_params(m);
        cJSON_AddItemToObject(o, "defaults", params_json(&md));
        if (i == 0) d = md;
        cJSON_AddItemToArray(arr, o);
    }
    cJSON *resp = cJSON_CreateObject();
    cJSON_AddItemToObject(resp, "models", arr);
    cJSON_AddItemToObject(resp, "defaults", params_json(&d));
    cJSON *lim = cJSON_CreateObject();
    cJSON_AddNumberToObject(lim, "max_beam", s->opt.max_beam);
    cJSON_AddNumberToObject(lim, "max_decoding_length", s->opt.max_decoding_length);
    cJSON_AddNumberToObject(lim, "char_limit", s->opt.char_limit);
    cJSON_AddNumberToObject(lim, "max_segments", s->opt.max_segments);
    cJSON_AddItemToObject(resp, "limits", lim);
    cJSON_AddStringToObject(resp, "version", tern_version());
    return send_json(s, c, cx, 200, resp, 0);
}

/* LibreTranslate's GET /frontend/settings, which its web page and some clients read for the
 * limits: the character limit, whether keys are needed, the default pair (the first model). */
static enum MHD_Result handle_settings(server_t *s, struct MHD_Connection *c, conn_t *cx) {
    char a[64], b[64];
    model_langs(engine_model_at(s->engine, 0), a, b, sizeof a);
    int nl = 0; /* a multilingual first model: its first two languages */
    const char *const *langs = engine_model_languages(engine_model_at(s->engine, 0), &nl);
    if (nl > 0) ml_code(langs[0], a, sizeof a), ml_code(langs[nl > 1], b, sizeof b);
    cJSON *o = cJSON_CreateObject(), *lang = cJSON_CreateObject(), *src = cJSON_CreateObject(),
          *tgt = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "charLimit", s->opt.char_limit);
    cJSON_AddNumberToObject(o, "frontendTimeout", 500);
    cJSON_AddBoolToObject(o, "apiKeys", s->opt.api_keys_file != NULL);
    cJSON_AddBoolToObject(o, "keyRequired", s->opt.require_api_key);
    cJSON_AddBoolToObject(o, "suggestions", 0);
    cJSON_AddBoolToObject(o, "filesTranslation", 1); /* POST /translate_file */
    cJSON_AddItemToObject(o, "supportedFilesFormat", cJSON_CreateStringArray(doc_formats, 4));
    cJSON_AddStringToObject(src, "code", a);
    cJSON_AddStringToObject(src, "name", language_name(a));
    cJSON_AddStringToObject(tgt, "code", b);
    cJSON_AddStringToObject(tgt, "name", language_name(b));
    cJSON_AddItemToObject(lang, "source", src);
    cJSON_AddItemToObject(lang, "target", tgt);
    cJSON_AddItemToObject(o, "language", lang);
    return send_json(s, c, cx, 200, o, 0);
}

static enum MHD_Result handle_health(server_t *s, struct MHD_Connection *c, conn_t *cx) {
    cJSON *o = cJSON_CreateObject();
    int draining = atomic_load(&s->draining);
    cJSON_AddStringToObject(o, "status", draining ? "draining" : "ok");
    cJSON_AddStringToObject(o, "version", tern_version());
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < engine_num_models(s->engine); i++)
        cJSON_AddItemToArray(arr, cJSON_CreateString(engine_model_name(engine_model_at(s->engine, i))));
    cJSON_AddItemToObject(o, "models", arr);
    return send_json(s, c, cx, draining ? 503 : 200, o, 0);
}

/* Compares in a time that does not depend on where a and b differ (their lengths may show). */
static int same_secret(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = la != lb;
    for (size_t i = 0; i < la; i++) d |= (unsigned char)(a[i] ^ b[i < lb ? i : 0]);
    return !d;
}

static enum MHD_Result handle_metrics(server_t *s, struct MHD_Connection *c, conn_t *cx) {
    if (s->opt.metrics_token) {
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        if (!auth || strncasecmp(auth, "Bearer ", 7) || !same_secret(auth + 7, s->opt.metrics_token)) {
            cJSON *j = cJSON_CreateObject();
            if (!j) return MHD_NO;
            cJSON_AddStringToObject(j, "error", auth ? "Unauthorized: wrong bearer token" :
                                    "Unauthorized: /metrics needs \"Authorization: Bearer TOKEN\"");
            char *txt = cJSON_PrintUnformatted(j);
            cJSON_Delete(j);
            if (!txt) return MHD_NO;
            struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
            if (!resp) {
                free(txt);
                return MHD_NO;
            }
            MHD_add_response_header(resp, "Content-Type", "application/json");
            MHD_add_response_header(resp, "WWW-Authenticate", "Bearer realm=\"metrics\"");
            add_common_headers(resp, cx, 401, strlen(txt));
            enum MHD_Result r = MHD_queue_response(c, 401, resp);
            MHD_destroy_response(resp);
            metrics_request(&s->metrics, cx->route, 401, time_now() - cx->t0);
            return r;
        }
    }
    size_t len = 0;
    metrics_extra_t ex = {0};
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    ex.connections = di ? (int)di->num_connections : -1;
    ex.slow_closed = atomic_load(&s->slow_closed);
    ex.log_dropped = s->alog ? alog_dropped(s->alog) : 0;
    char *txt = metrics_render(&s->metrics, s->engine, atomic_load(&s->inflight), &ex, &len);
    if (!txt) return MHD_NO;
    return send_body(s, c, cx, 200, txt, len, "text/plain; version=0.0.4; charset=utf-8", 0);
}

/* ------------------------------------------------------------------ dispatch */

/* 405 with the Allow header RFC 9110 asks for. */
static enum MHD_Result send_405(server_t *s, struct MHD_Connection *c, conn_t *cx, const char *method,
                                const char *url) {
    char msg[512];
    snprintf(msg, sizeof msg, "Method Not Allowed: %s %s", method, url);
    cJSON *j = cJSON_CreateObject();
    if (!j) return MHD_NO;
    cJSON_AddStringToObject(j, "error", msg);
    char *txt = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!txt) return MHD_NO;
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(txt);
        return MHD_NO;
    }
    int post = cx->route == R_TRANSLATE || cx->route == R_DETECT || cx->route == R_V1_TRANSLATE ||
               cx->route == R_V1_SCORE || cx->route == R_TRANSLATE_FILE;
    MHD_add_response_header(resp, "Content-Type", "application/json");
    MHD_add_response_header(resp, "Allow", post ? "POST, OPTIONS" : "GET, HEAD, OPTIONS");
    add_common_headers(resp, cx, 405, strlen(txt));
    enum MHD_Result r = MHD_queue_response(c, 405, resp);
    MHD_destroy_response(resp);
    metrics_request(&s->metrics, cx->route, 405, time_now() - cx->t0);
    return r;
}

/* The body limit of a request: --max-file-size for /translate_file, --max-body otherwise. */
static size_t body_limit(const server_t *s, const conn_t *cx) {
    return cx->route == R_TRANSLATE_FILE ? s->opt.max_file_size : s->opt.max_body;
}

static enum MHD_Result send_too_large(server_t *s, struct MHD_Connection *c, conn_t *cx) {
    if (cx->route == R_TRANSLATE_FILE)
        return send_error(s, c, cx, 413, 0, "File too large (limit %zu bytes: --max-file-size)", s->opt.max_file_size);
    return send_error(s, c, cx, 413, 0, "Request body too large (limit %zu bytes)", s->opt.max_body);
}

/* A POST's headers: a declared body over the limit is refused at once (413); a form body to
 * /translate gets a post processor, and /translate without JSON takes its values from the form or
 * the query string. */
static enum MHD_Result conn_post_headers(server_t *s, struct MHD_Connection *c, conn_t *cx) {
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > body_limit(s, cx)) {
        cx->early_done = 1;
        return send_too_large(s, c, cx);
    }
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    int json = ct && (strstr(ct, "application/json") || strstr(ct, "+json"));
    int lt_form = cx->route == R_TRANSLATE || cx->route == R_DETECT || cx->route == R_TRANSLATE_FILE;
    if (lt_form && !json && ct &&
        (!strncasecmp(ct, "application/x-www-form-urlencoded", 33) || !strncasecmp(ct, "multipart/form-data", 19))) {
        cx->is_form = 1;
        cx->pp = MHD_create_post_processor(c, 16384, on_form_field, cx);
        if (!cx->pp) {
            cx->early_done = 1;
            return send_error(s, c, cx, 400, 0, "Invalid request: malformed form body");
        }
    } else if (lt_form && !json) {
        cx->is_form = 1; /* another type or none: values from the query string, as Flask's request.values */
    }
    return MHD_YES;
}

/* X-Forwarded-For: the values of all its headers, joined by commas in their order. */
typedef struct {
    char *buf;
    size_t len;
} xff_t;

static enum MHD_Result xff_gather(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    xff_t *x = cls;
    if (!key || !value || strcasecmp(key, "X-Forwarded-For")) return MHD_YES;
    size_t n = strlen(value);
    char *b = realloc(x->buf, x->len + n + 2);
    if (!b) return MHD_NO;
    x->buf = b;
    if (x->len) b[x->len++] = ',';
    memcpy(b + x->len, value, n + 1);
    x->len += n;
    return MHD_YES;
}

/* The client's address (cx->client): the peer, or behind a trusted proxy the rightmost address
 * of X-Forwarded-For that is not itself a trusted proxy (netaddr.h). */
static void conn_client(server_t *s, struct MHD_Connection *c, conn_t *cx) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    net_addr_t peer;
    if (net_from_sockaddr(ci ? ci->client_addr : NULL, &peer)) memset(&peer, 0, sizeof peer);
    cx->client = peer;
    if (s->n_trusted && net_in(s->trusted, s->n_trusted, &peer)) {
        xff_t x = {0};
        MHD_get_connection_values(c, MHD_HEADER_KIND, xff_gather, &x);
        if (x.buf) net_client(&peer, x.buf, s->trusted, s->n_trusted, &cx->client);
        free(x.buf);
    }
    net_format(&cx->client, cx->client_txt, sizeof cx->client_txt);
}

static watch_t *conn_watch(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* A request's first call (its headers): its connection state, counted in flight. */
static enum MHD_Result conn_open(server_t *s, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, void **con_cls) {
    conn_t *cx = calloc(1, sizeof *cx);
    if (!cx) return MHD_NO;
    *con_cls = cx;
    atomic_fetch_add(&s->inflight, 1);
    cx->t0 = time_now();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    cx->wall = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    conn_client(s, c, cx);
    snprintf(cx->method, sizeof cx->method, "%s", method);
    snprintf(cx->version, sizeof cx->version, "%s", version ? version : "");
    snprintf(cx->id, sizeof cx->id, "%08x%08llx", s->id_prefix,
             (unsigned long long)atomic_fetch_add(&s->next_id, 1));
    cx->path = strdup(url);
    const char *ua = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_USER_AGENT);
    const char *ref = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_REFERER);
    if (ua) cx->user_agent = strdup(ua);
    if (ref) cx->referer = strdup(ref);
    cx->route = route_of(url);
    cx->after_drain = atomic_load(&s->draining);
    cx->is_post = !strcmp(method, MHD_HTTP_METHOD_POST);
    if (cx->is_post) return conn_post_headers(s, c, cx);
    return MHD_YES;
}

/* A piece of the body (all of it taken): to the form's post processor or appended to the body,
 * up to the limit (too_large: 1 over it, 2 a malformed form). */
static enum MHD_Result conn_receive(server_t *s, conn_t *cx, const char *upload_data, size_t *upload_data_size) {
    size_t n = *upload_data_size;
    *upload_data_size = 0;
    if (cx->early_done || cx->too_large) return MHD_YES;
    if (cx->len + n > body_limit(s, cx)) {
        cx->too_large = 1;
        return MHD_YES;
    }
    if (cx->pp) {
        if (MHD_post_process(cx->pp, upload_data, n) != MHD_YES) cx->too_large = 2;
        cx->len += n;
        return MHD_YES;
    }
    if (cx->len + n + 1 > cx->cap) {
        size_t cap = cx->cap ? cx->cap : 4096;
        while (cap < cx->len + n + 1) cap *= 2;
        char *b = realloc(cx->body, cap);
        if (!b) return MHD_NO;
        cx->body = b;
        cx->cap = cap;
    }
    memcpy(cx->body + cx->len, upload_data, n);
    cx->len += n;
    cx->body[cx->len] = 0;
    return MHD_YES;
}

/* The whole request received: its route's handler, 204 to OPTIONS, 404 for an unknown path and
 * 405 for a method the route does not take. */
static enum MHD_Result route_request(server_t *s, struct MHD_Connection *c, conn_t *cx, const char *url,
                                     const char *method) {
    int get = !strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD);
    if (!strcmp(method, MHD_HTTP_METHOD_OPTIONS)) return send_body(s, c, cx, 204, NULL, 0, "text/plain", 0);
    switch (cx->route) {
    case R_PAGE:
        if (!get) break;
        return send_static(s, c, cx, page_html, page_html_len, "text/html; charset=utf-8");
    case R_SETTINGS:
        if (!get) break;
        return handle_settings(s, c, cx);
    case R_OPENAPI:
        if (!get) break;
        if (s->openapi) return send_static(s, c, cx, (const unsigned char *)s->openapi, strlen(s->openapi),
                                           "application/json");
        return send_static(s, c, cx, openapi_json, openapi_json_len, "application/json");
    case R_LANGUAGES:
        if (!get) break;
        return handle_languages(s, c, cx);
    case R_V1_MODELS:
        if (!get) break;
        return handle_models(s, c, cx);
    case R_HEALTH:
        if (!get) break;
        return handle_health(s, c, cx);
    case R_METRICS:
        if (!get) break;
        return handle_metrics(s, c, cx);
    case R_TRANSLATE:
        if (!cx->is_post) break;
        return handle_translate(s, c, cx);
    case R_DETECT:
        if (!cx->is_post) break;
        return handle_detect(s, c, cx);
    case R_TRANSLATE_FILE:
        if (!cx->is_post) break;
        return handle_translate_file(s, c, cx);
    case R_DOWNLOAD_FILE:
        if (!get) break;
        return handle_download(s, c, cx, url);
    case R_V1_TRANSLATE:
    case R_V1_SCORE:
        if (!cx->is_post) break;
        return handle_v1(s, c, cx, cx->route == R_V1_SCORE);
    default: return send_error(s, c, cx, 404, 0, "Not Found: %s", url);
    }
    return send_405(s, c, cx, method, url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    server_t *s = cls;
    conn_t *cx = *con_cls;
    if (!cx) return conn_open(s, c, url, method, version, con_cls);
    if (*upload_data_size) return conn_receive(s, cx, upload_data, upload_data_size);
    watch_t *w = conn_watch(c); /* the whole request came: the watchdog lets it be */
    if (w) {
        pthread_mutex_lock(&s->watch_mu);
        w->busy = 1;
        pthread_mutex_unlock(&s->watch_mu);
    }
    if (cx->early_done) return MHD_YES;
    if (cx->too_large == 1) return send_too_large(s, c, cx);
    if (cx->file_oom) return send_error(s, c, cx, 500, 0, "Cannot translate file: out of memory");
    if (cx->too_large == 2) return send_error(s, c, cx, 400, 0, "Invalid request: malformed form body");
    if (cx->after_drain && cx->route != R_HEALTH && cx->route != R_METRICS)
        return send_error(s, c, cx, 503, 1, "Server shutting down");
    return route_request(s, c, cx, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    server_t *s = cls;
    conn_t *cx = *con_cls;
    if (!cx) return;
    if (s->alog) {
        alog_entry_t e = {.time = cx->wall, .client = cx->client_txt, .method = cx->method,
                          .path = cx->path ? cx->path : "", .version = cx->version, .status = cx->status,
                          .bytes = cx->bytes, .duration = (cx->answered > 0 ? cx->answered : time_now()) - cx->t0,
                          .user_agent = cx->user_agent,
                          .referer = cx->referer, .request_id = cx->id};
        alog_write(s->alog, &e);
    }
    watch_t *w = conn_watch(c); /* kept alive: the next request has timeout_s from now */
    if (w) {
        pthread_mutex_lock(&s->watch_mu);
        w->busy = 0;
        w->since = time_now();
        pthread_mutex_unlock(&s->watch_mu);
    }
    conn_free(cx);
    *con_cls = NULL;
    atomic_fetch_sub(&s->inflight, 1);
}

static void on_log(void *cls, const char *fmt, va_list ap) {
    server_t *s = cls;
    va_list ap2;
    va_copy(ap2, ap);
    if (!s->daemon && !s->start_error[0]) vsnprintf(s->start_error, sizeof s->start_error, fmt, ap2); /* starting: the first says why */
    va_end(ap2);
    if (s->opt.quiet) return;
    fprintf(stderr, "tern serve: ");
    vfprintf(stderr, fmt, ap);
}

/* ------------------------------------------------------------------ slow clients */

/* MHD_OPTION_NOTIFY_CONNECTION: each connection is watched from its start to its close (called
 * before libmicrohttpd closes the socket: the watchdog never shuts down a reused descriptor). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    server_t *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        watch_t *w = calloc(1, sizeof *w);
        *socket_context = w;
        if (!w) return;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        w->fd = ci ? ci->connect_fd : -1;
        w->since = time_now();
        pthread_mutex_lock(&s->watch_mu);
        w->next = s->watches;
        if (s->watches) s->watches->prev = w;
        s->watches = w;
        pthread_mutex_unlock(&s->watch_mu);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        watch_t *w = *socket_context;
        if (!w) return;
        pthread_mutex_lock(&s->watch_mu);
        if (w->prev) w->prev->next = w->next;
        else s->watches = w->next;
        if (w->next) w->next->prev = w->prev;
        pthread_mutex_unlock(&s->watch_mu);
        free(w);
        *socket_context = NULL;
    }
}

/* libmicrohttpd's timeout counts idle time only: a client sending a byte a second (slowloris)
 * never reaches it. This thread shuts down the socket of a connection whose request has not
 * arrived whole timeout_s after the connection opened (or after its previous answer). */
static void *watchdog(void *arg) {
    server_t *s = arg;
    pthread_mutex_lock(&s->watch_mu);
    while (!s->watch_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->watch_cv, &s->watch_mu, &ts);
        double now = time_now();
        for (watch_t *w = s->watches; w; w = w->next)
            if (!w->busy && w->fd >= 0 && now - w->since > s->opt.timeout_s) {
                shutdown(w->fd, SHUT_RDWR);
                w->fd = -1;
                atomic_fetch_add(&s->slow_closed, 1);
            }
    }
    pthread_mutex_unlock(&s->watch_mu);
    return NULL;
}

/* ------------------------------------------------------------------ the description */

/* The schema object at components.schemas.<schema>.properties.<prop>, or NULL. */
static cJSON *api_prop(cJSON *root, const char *schema, const char *prop) {
    cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "components");
    o = o ? cJSON_GetObjectItemCaseSensitive(o, "schemas") : NULL;
    o = o ? cJSON_GetObjectItemCaseSensitive(o, schema) : NULL;
    o = o ? cJSON_GetObjectItemCaseSensitive(o, "properties") : NULL;
    return o ? cJSON_GetObjectItemCaseSensitive(o, prop) : NULL;
}

static void api_set(cJSON *o, const char *key, double v) {
    if (!o) return;
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    cJSON_AddNumberToObject(o, key, v);
}

/* q of a request schema: a list has at most max_items (the characters are limited too, all texts
 * of a request together: no schema keyword says so; a text over the limit alone may meet the body
 * limit first, 413). */
static void api_q(cJSON *q, int max_items) {
    cJSON *alts = q ? cJSON_GetObjectItemCaseSensitive(q, "oneOf") : NULL, *a;
    cJSON_ArrayForEach(a, alts) {
        cJSON *type = cJSON_GetObjectItemCaseSensitive(a, "type");
        if (!cJSON_IsString(type)) continue;
        if (!strcmp(type->valuestring, "array") && max_items >= 0) api_set(a, "maxItems", max_items);
    }
}

/* openapi.json with the limits of this server's options stated where a schema can state them:
 * the largest beam, decoding length and alternatives, the items of a q list. */
static char *api_with_limits(const server_options_t *o) {
    cJSON *root = cJSON_ParseWithLength((const char *)openapi_json, openapi_json_len);
    if (!root) return NULL;
    static const char *const beams[] = {"beam_size", "num_hypotheses", "num_samples"};
    static const char *const lengths[] = {"max_decoding_length", "max_length_b", "min_length", "no_repeat_ngram_size"};
    for (int i = 0; i < 3; i++) api_set(api_prop(root, "V1TranslateRequest", beams[i]), "maximum", o->max_beam);
    for (int i = 0; i < 4; i++)
        api_set(api_prop(root, "V1TranslateRequest", lengths[i]), "maximum", o->max_decoding_length);
    cJSON *alt = api_prop(root, "TranslateRequest", "alternatives"), *a;
    cJSON *alts = alt ? cJSON_GetObjectItemCaseSensitive(alt, "oneOf") : NULL;
    cJSON_ArrayForEach(a, alts) {
        cJSON *type = cJSON_GetObjectItemCaseSensitive(a, "type");
        if (cJSON_IsString(type) && !strcmp(type->valuestring, "integer")) api_set(a, "maximum", o->max_beam - 1);
    }
    int v1_items = o->batch_limit >= 0 && o->batch_limit < o->max_segments ? o->batch_limit : o->max_segments;
    api_q(api_prop(root, "TranslateRequest", "q"), o->batch_limit);
    api_q(api_prop(root, "V1TranslateRequest", "q"), v1_items);
    char *txt = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return txt;
}

/* ------------------------------------------------------------------ TLS */

/* A PEM file whole (at most 1 MiB), NUL-terminated, checked for its BEGIN line. */
static tern_status_t read_pem(const char *opt, const char *path, const char *what, char **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return tern_error(TERN_ERR_IO, "%s %s: cannot open (%s)", opt, path, strerror(errno));
    char *b = malloc((1 << 20) + 1);
    size_t n = b ? fread(b, 1, 1 << 20, f) : 0;
    int err = ferror(f), more = b && n == 1 << 20 && fgetc(f) != EOF;
    fclose(f);
    if (!b) return tern_error(TERN_ERR_NOMEM, "out of memory");
    b[n] = 0;
    tern_status_t st = TERN_OK;
    if (err) st = tern_error(TERN_ERR_IO, "%s %s: read error", opt, path);
    else if (more) st = tern_error(TERN_ERR_FORMAT, "%s %s: larger than 1 MiB, not a PEM file", opt, path);
    else if (!strstr(b, "-----BEGIN ") || !strstr(b, what))
        st = tern_error(TERN_ERR_FORMAT, "%s %s: not a PEM %s (no \"-----BEGIN ...%s-----\" line)", opt, path,
                        !strcmp(what, "CERTIFICATE") ? "certificate" : "private key", what);
    if (st) {
        free(b);
        return st;
    }
    *out = b;
    return TERN_OK;
}

/* ------------------------------------------------------------------ life cycle */

server_options_t server_default_options(void) {
    server_options_t o;
    memset(&o, 0, sizeof o);
    o.host = "127.0.0.1";
    o.port = 5000;
    o.max_body = 1 << 20;
    o.char_limit = 20000;
    o.batch_limit = 256;
    o.max_segments = 512;
    o.split_sentences = 1;
    o.max_beam = 16;
    o.max_decoding_length = 512;
    o.max_connections = 256;
    o.timeout_s = 30;
    o.max_file_size = 10u << 20;
    o.max_unzipped = 100u << 20;
    o.max_zip_entries = 1000;
    o.max_files = 64;
    o.file_lifetime_s = 1800;
    return o;
}

tern_status_t server_start(server_t **out, engine_t *engine, const server_options_t *o) {
    *out = NULL;
    server_t *s = calloc(1, sizeof *s);
    if (!s) return tern_error(TERN_ERR_NOMEM, "out of memory");
    s->engine = engine;
    s->opt = *o;
    pthread_mutex_init(&s->keys_mu, NULL);
    pthread_mutex_init(&s->files_mu, NULL);
    pthread_mutex_init(&s->watch_mu, NULL);
    pthread_cond_init(&s->watch_cv, NULL);
    metrics_init(&s->metrics);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    s->id_prefix = (unsigned)(now.tv_nsec ^ (now.tv_sec << 8) ^ ((unsigned)getpid() << 16));
    tern_status_t st;
    if ((st = files_init(s))) {
        server_stop(s);
        return st;
    }
    if (o->req_limit > 0 && !(s->ips = calloc(IP_SLOTS, sizeof *s->ips))) {
        server_stop(s);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    if (o->api_keys_file && (st = load_keys(s, o->api_keys_file))) {
        server_stop(s);
        return st;
    }
    if (o->trusted_proxies) {
        char err[256];
        if (net_parse_cidrs(o->trusted_proxies, &s->trusted, &s->n_trusted, err, sizeof err)) {
            server_stop(s);
            return tern_error(TERN_ERR_INVALID_ARG, "--trusted-proxies: %s", err);
        }
    }
    /* --host: IPv4 (default 127.0.0.1) or IPv6 ("::1"; "::" serves IPv4 clients too: dual stack) */
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    const char *host = o->host;
    char hbuf[64];
    size_t hl = strlen(host);
    if (hl > 2 && hl < sizeof hbuf && host[0] == '[' && host[hl - 1] == ']') { /* "[::1]" as in a URL */
        snprintf(hbuf, sizeof hbuf, "%.*s", (int)(hl - 2), host + 1);
        host = hbuf;
    }
    struct sockaddr_in *a4 = (struct sockaddr_in *)&addr;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&addr;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)o->port);
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)o->port);
        flags |= IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr) ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
        if (MHD_is_feature_supported(MHD_FEATURE_IPv6) != MHD_YES) {
            server_stop(s);
            return tern_error(TERN_ERR_UNSUPPORTED, "--host %s: this libmicrohttpd has no IPv6", o->host);
        }
    } else {
        server_stop(s);
        return tern_error(TERN_ERR_INVALID_ARG, "--host %s: not an IPv4 or IPv6 address (e.g. 127.0.0.1, 0.0.0.0, "
                          "::1, ::)", o->host);
    }
    if (!o->ssl_cert != !o->ssl_key) {
        server_stop(s);
        return tern_error(TERN_ERR_INVALID_ARG, "%s: HTTPS needs both --ssl-cert FILE and --ssl-key FILE",
                          o->ssl_cert ? "--ssl-cert without --ssl-key" : "--ssl-key without --ssl-cert");
    }
    if (o->ssl_cert) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            server_stop(s);
            return tern_error(TERN_ERR_UNSUPPORTED, "--ssl-cert: this libmicrohttpd was built without TLS (GnuTLS)");
        }
        if ((st = read_pem("--ssl-cert", o->ssl_cert, "CERTIFICATE", &s->cert_pem)) ||
            (st = read_pem("--ssl-key", o->ssl_key, "PRIVATE KEY", &s->key_pem))) {
            server_stop(s);
            return st;
        }
        flags |= MHD_USE_TLS;
    }
    if (!(s->openapi = api_with_limits(o))) {
        server_stop(s);
        return tern_error(TERN_ERR_INTERNAL, "openapi.json: not valid JSON");
    }
    if (o->access_log && (st = alog_open(&s->alog, o->access_log, o->access_log_json))) {
        server_stop(s);
        return st;
    }
    if (pthread_create(&s->watchdog, NULL, watchdog, s)) {
        server_stop(s);
        return tern_error(TERN_ERR_NOMEM, "cannot start the connection watchdog");
    }
    s->watchdog_started = 1;
    /* the TLS options last: MHD_OPTION_END in their place without a certificate */
    s->daemon = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, s,
                                 MHD_OPTION_EXTERNAL_LOGGER, on_log, s,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections,
                                 MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)o->per_ip_connections,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout_s,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                 MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                                 s->cert_pem ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, s->cert_pem,
                                 MHD_OPTION_HTTPS_MEM_KEY, s->key_pem,
                                 MHD_OPTION_END);
    if (!s->daemon) {
        if (s->cert_pem && s->start_error[0]) { /* GnuTLS refused the pair: its words */
            size_t l = strlen(s->start_error);
            while (l && (s->start_error[l - 1] == '\n' || s->start_error[l - 1] == '.')) s->start_error[--l] = 0;
            st = tern_error(TERN_ERR_FORMAT, "--ssl-cert %s, --ssl-key %s: cannot use them: %s (a certificate and "
                            "its own private key, PEM)", o->ssl_cert, o->ssl_key, s->start_error);
        } else
            st = tern_error(TERN_ERR_IO, "cannot listen on %s port %d (in use, or not allowed)", o->host, o->port);
        server_stop(s);
        return st;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    *out = s;
    return TERN_OK;
}

int server_port(const server_t *s) { return s->port; }

int server_drain(server_t *s, double timeout_s) {
    atomic_store(&s->draining, 1);
    MHD_socket fd = MHD_quiesce_daemon(s->daemon);
    if (fd != MHD_INVALID_SOCKET) close(fd);
    double t0 = time_now();
    struct timespec ts = {0, 10 * 1000 * 1000};
    while (atomic_load(&s->inflight) > 0 && time_now() - t0 < timeout_s) nanosleep(&ts, NULL);
    return atomic_load(&s->inflight);
}

int server_reload(server_t *s) {
    int rc = 0;
    if (s->opt.api_keys_file) {
        tern_status_t st = load_keys(s, s->opt.api_keys_file);
        if (st) {
            fprintf(stderr, "tern serve: SIGHUP: the API keys are not reloaded, the old keys stay: %s\n",
                    tern_last_error());
            rc = 1;
        } else if (!s->opt.quiet) {
            pthread_mutex_lock(&s->keys_mu);
            int n = s->n_keys;
            pthread_mutex_unlock(&s->keys_mu);
            fprintf(stderr, "tern serve: API keys reloaded from %s (%d keys)\n", s->opt.api_keys_file, n);
        }
    }
    if (s->alog) alog_reopen(s->alog);
    return rc;
}

void server_stop(server_t *s) {
    if (!s) return;
    if (s->daemon) MHD_stop_daemon(s->daemon);
    if (s->watchdog_started) {
        pthread_mutex_lock(&s->watch_mu);
        s->watch_stop = 1;
        pthread_cond_signal(&s->watch_cv);
        pthread_mutex_unlock(&s->watch_mu);
        pthread_join(s->watchdog, NULL);
    }
    alog_close(s->alog);
    free(s->trusted);
    free(s->openapi);
    free(s->cert_pem);
    free(s->key_pem);
    pthread_mutex_destroy(&s->watch_mu);
    pthread_cond_destroy(&s->watch_cv);
    free(s->keys);
    free(s->ips);
    pthread_mutex_destroy(&s->keys_mu);
    files_remove_all(s);
    pthread_mutex_destroy(&s->files_mu);
    metrics_free(&s->metrics);
    free(s);
}
