/* server.h — the HTTP side of `tern serve` (libmicrohttpd, one thread per connection): routes,
 * request parsing and limits, API keys and rate limits, metrics, the web page, draining.
 *
 * Endpoints: POST /translate, POST /detect, GET /languages and GET /frontend/settings
 * (LibreTranslate's API; a pair without a model goes through English when src-en and en-tgt are
 * loaded), POST /v1/translate and
 * POST /translate_file and GET /download_file/ID.NAME (LibreTranslate's document translation:
 * docfile.h), POST /v1/score (Tern's own, with per-call search options), GET /v1/models, GET /health,
 * GET /metrics (Prometheus text), GET / (the web page), GET /openapi.json. */
#ifndef TERN_SERVE_SERVER_H
#define TERN_SERVE_SERVER_H

#include <stddef.h>

#include "serve/engine.h"

typedef struct {
    const char *host;        /* address to listen on (default 127.0.0.1) */
    int port;                /* 0: any free port (server_port() says which) */
    size_t max_body;         /* bytes of a request body, else 413 */
    int char_limit;          /* characters (code points) of a request, else 400; -1: none */
    int batch_limit;         /* items of a q list, else 400; -1: none */
    int max_segments;        /* segments (lines) of a request, else 400 */
    int max_beam;            /* largest beam_size / num_hypotheses a call may ask for */
    int max_decoding_length; /* largest max_decoding_length a call may ask for */
    int max_connections;     /* connections served at once */
    int timeout_s;           /* an idle or slow connection is closed after this many seconds */
    const char *api_keys_file; /* lines "KEY [REQUESTS_PER_MINUTE]"; NULL: no keys */
    int require_api_key;     /* 1: requests without a key are refused (400, as LibreTranslate) */
    int req_limit;           /* requests per minute per client address without a valid key; 0: none */
    int quiet;               /* no messages but errors (the access log is --access-log) */
    int split_sentences;     /* 1 (default): each line's sentences are translated apart (segments.h) */
    size_t max_file_size;    /* bytes of a /translate_file upload, else 413 (default 10 MB) */
    size_t max_unzipped;     /* bytes of a .docx/.odt's members once uncompressed, else 413 (100 MB) */
    int max_zip_entries;     /* members of a .docx/.odt, else 413 (1000) */
    int max_files;           /* translated files kept for GET /download_file (64; the oldest go first) */
    int file_lifetime_s;     /* seconds a translated file is kept (1800) */
    /* production (docs/serving.md, "Production") */
    const char *ssl_cert, *ssl_key; /* PEM files: HTTPS (libmicrohttpd's GnuTLS) */
    const char *access_log;  /* FILE, or "-" for standard output; NULL: none */
    int access_log_json;     /* 1: JSON lines, 0: Apache's combined format */
    const char *trusted_proxies; /* "CIDR[,CIDR...]": peers whose X-Forwarded-For names the client */
    const char *metrics_token; /* GET /metrics needs "Authorization: Bearer TOKEN"; NULL: open */
    int per_ip_connections;  /* connections at once from one peer address; 0: no limit */
} server_options_t;

server_options_t server_default_options(void);

typedef struct server server_t;

/* Starts listening and serving (threads of its own). */
tern_status_t server_start(server_t **server, engine_t *engine, const server_options_t *options);
int server_port(const server_t *server);
/* Stops accepting connections; requests already received are answered; new requests on open
 * connections get 503. Waits until none is in flight, at most timeout_s seconds; returns the
 * number still in flight (0 normally). */
int server_drain(server_t *server, double timeout_s);
/* SIGHUP: reloads the API keys file (a bad file keeps the old keys: an error on stderr, 1
 * returned) and reopens the access log (logrotate). */
int server_reload(server_t *server);
/* Closes every connection and frees the server (not the engine). */
void server_stop(server_t *server);

#endif
