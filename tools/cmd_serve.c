/* cmd_serve.c — `tern serve`: an HTTP translation server (src/serve/). Signals: SIGTERM/SIGINT stop
 * accepting, answer the requests in flight and exit 0; SIGHUP reloads the models from their
 * directories without dropping requests. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "batch/translator.h"
#include "cli.h"
#include "serve/engine.h"
#include "serve/server.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: tern serve --model SRC-TGT=DIR [--model SRC-TGT=DIR ...] [options]\n"
"\n"
"Serves translation over HTTP/1.1: LibreTranslate's API (POST /translate, POST /detect, GET\n"
"/languages, GET /frontend/settings; source \"auto\" detected by CLD2; a pair without a model\n"
"goes through English when SRC-en and en-TGT are loaded), Tern's\n"
"own (POST /v1/translate with per-call search options and n-best scores, POST /v1/score,\n"
"GET /v1/models), GET /health, GET /metrics (Prometheus), a web page at /, GET /openapi.json.\n"
"Segments of all waiting requests are batched together per model (length-sorted, under the\n"
"token budget). SIGTERM or SIGINT: stop accepting, answer the requests in flight, exit 0.\n"
"SIGHUP: reload every model from its directory; requests in flight are not dropped.\n"
"\n"
"models:\n"
"  -m, --model SRC-TGT=DIR     a model and its language pair, e.g. en-de=models/en-de (repeat\n"
"                              for more models); DIR may name an installed model (en-de=en-de:\n"
"                              TERN_MODELS_DIR, then PREFIX/share/tern/models); a multilingual\n"
"                              model (M2M-100, NLLB) as NAME=DIR serves every pair of its\n"
"                              languages\n"
"  --compute-type TYPE         auto (default), float32, int8\n"
"  -w, --workers N             translators per model, each on its own thread, sharing one copy\n"
"                              of the weights (default: cores / (threads x models), at most 8,\n"
"                              at least 1)\n"
"  -t, --threads N             intra-op threads of each translator (default: cores / (workers x\n"
"                              models), at least 1; with neither -w nor -t: one thread per\n"
"                              translator and one translator per core, up to 8 per model)\n"
"\n"
"default search, for every model (a /v1/translate request may change them per call; a setting\n"
"not given is each model's own, from its generation_config.json, else the default below):\n"
"  -b, --beam-size N           default 4\n"
"  --length-penalty A          default 0\n"
"  --max-decoding-length N     default 256\n"
"\n"
"batching and limits:\n"
"  --max-batch-tokens N        token budget of a batch: segments x longest source (default 4096)\n"
"  --max-batch-size N          cap on segments per batch (default 0: none)\n"
"  --no-cross-batching         batch each request's segments alone (for comparison)\n"
"  --max-queue N               segments waiting per model; beyond, 503 + Retry-After (default 4096)\n"
"  --max-body BYTES            request body limit, else 413 (default 1048576)\n"
"  --char-limit N              characters per request, else 400 (default 20000; -1: none); for\n"
"                              POST /translate_file, characters of the document's text\n"
"  --max-file-size BYTES       upload limit of POST /translate_file, else 413 (default 10485760)\n"
"  --max-unzipped BYTES        a .docx/.odt's members once uncompressed, else 413 (default 104857600)\n"
"  --max-zip-entries N         members of a .docx/.odt, else 413 (default 1000)\n"
"  --max-files N               translated files kept for GET /download_file (default 64: the oldest\n"
"                              goes first); each is kept --file-lifetime seconds (default 1800)\n"
"  --file-lifetime SECONDS     see --max-files\n"
"  --batch-limit N             items of a q list, else 400 (default 256; -1: none)\n"
"  --max-segments N            segments (sentences, lines) per request, else 400 (default 512)\n"
"  --no-split-sentences        translate each line whole (default: each sentence apart, cut by ICU's\n"
"                              sentence break iterator for the source language, as LibreTranslate)\n"
"  --max-beam N                largest beam a call may ask for (default 16)\n"
"\n"
"network:\n"
"  --host ADDR                 address to listen on: IPv4 (default 127.0.0.1; 0.0.0.0: all) or IPv6\n"
"                              (::1; \"::\" takes IPv4 clients too: dual stack)\n"
"  -p, --port N                port (default 5000; 0: any free port, printed on stderr)\n"
"  --ssl-cert FILE             HTTPS with this PEM certificate (chain) ...\n"
"  --ssl-key FILE              ... and its PEM private key (GnuTLS, through libmicrohttpd)\n"
"  --max-connections N         connections at once; beyond, new ones are refused (default 256)\n"
"  --max-connections-per-ip N  connections at once from one peer address (default 0: no limit;\n"
"                              behind a proxy every client has the proxy's address)\n"
"  --connection-timeout S      a connection idle for S seconds, or whose request has not come whole\n"
"                              S seconds after it opened (or after its previous answer), is\n"
"                              closed: a client trickling its headers cannot hold a thread\n"
"                              (default 30)\n"
"  --timeout S                 the same as --connection-timeout (its older name)\n"
"  --drain-timeout S           on SIGTERM, wait at most S seconds for requests in flight (default 60)\n"
"  --api-keys FILE             lines \"KEY [REQUESTS_PER_MINUTE]\": an unknown key gets 403, a key\n"
"                              over its rate 429\n"
"  --require-api-key           with --api-keys: requests without a key get 400\n"
"  --req-limit N               requests per minute from one client address without a valid key,\n"
"                              else 429 (as LibreTranslate's --req-limit; default 0: none)\n"
"  --trusted-proxies CIDR[,CIDR...]  peers (reverse proxies) whose X-Forwarded-For names the client:\n"
"                              its rightmost address outside these ranges is the client address of\n"
"                              --req-limit and of the access log; any other peer's header is ignored\n"
"  --access-log FILE           a line per request to FILE (\"-\": standard output), reopened on SIGHUP\n"
"  --access-log-format F       combined (Apache's, default) or json (JSON lines: time, client, method,\n"
"                              path, protocol, status, bytes, duration, user_agent, referer,\n"
"                              request_id; X-Request-Id of the response)\n"
"  --metrics-token TOKEN       GET /metrics needs \"Authorization: Bearer TOKEN\", else 401\n"
"  --metrics-token-file FILE   the same, the token read from FILE (its first line)\n"
"  -q, --quiet                 no messages but errors\n"
"  -h, --help                  this help\n"
"\n"
"Every option may also come from the environment: TERN_SERVE_ and the long name in capitals with\n"
"'_' for '-' (TERN_SERVE_PORT=8080, TERN_SERVE_API_KEYS=/etc/tern/keys; a flag as 1/true/yes or\n"
"0/false/no; TERN_SERVE_MODEL holds one or more SRC-TGT=DIR separated by spaces). An option given\n"
"on the command line wins over its variable. SIGHUP also reloads --api-keys (a bad file keeps the\n"
"old keys) and reopens --access-log.\n");
}

enum {
    O_COMPUTE = 1000, O_LP, O_MAXDEC, O_MBT, O_MBS, O_NO_CROSS, O_MAXQ, O_MAXBODY, O_CHARS, O_MAXFILE, O_MAXUNZIP,
    O_MAXENTRIES, O_MAXFILES, O_FILELIFE, O_BATCHLIM, O_MAXSEG, O_MAXBEAM, O_HOST, O_MAXCONN, O_TIMEOUT, O_DRAIN,
    O_KEYS, O_REQKEY, O_REQLIMIT, O_NOSPLIT, O_CERT, O_KEY, O_PERIP, O_CTIMEOUT, O_TRUSTED, O_ALOG, O_ALOGFMT,
    O_MTOKEN, O_MTOKENFILE
};

static const struct option long_opts[] = {
    {"model", required_argument, 0, 'm'},
    {"compute-type", required_argument, 0, O_COMPUTE},
    {"workers", required_argument, 0, 'w'},
    {"threads", required_argument, 0, 't'},
    {"beam-size", required_argument, 0, 'b'},
    {"length-penalty", required_argument, 0, O_LP},
    {"max-decoding-length", required_argument, 0, O_MAXDEC},
    {"max-batch-tokens", required_argument, 0, O_MBT},
    {"max-batch-size", required_argument, 0, O_MBS},
    {"no-cross-batching", no_argument, 0, O_NO_CROSS},
    {"max-queue", required_argument, 0, O_MAXQ},
    {"max-body", required_argument, 0, O_MAXBODY},
    {"max-file-size", required_argument, 0, O_MAXFILE},
    {"max-unzipped", required_argument, 0, O_MAXUNZIP},
    {"max-zip-entries", required_argument, 0, O_MAXENTRIES},
    {"max-files", required_argument, 0, O_MAXFILES},
    {"file-lifetime", required_argument, 0, O_FILELIFE},
    {"char-limit", required_argument, 0, O_CHARS},
    {"batch-limit", required_argument, 0, O_BATCHLIM},
    {"max-segments", required_argument, 0, O_MAXSEG},
    {"no-split-sentences", no_argument, 0, O_NOSPLIT},
    {"max-beam", required_argument, 0, O_MAXBEAM},
    {"host", required_argument, 0, O_HOST},
    {"port", required_argument, 0, 'p'},
    {"max-connections", required_argument, 0, O_MAXCONN},
    {"timeout", required_argument, 0, O_TIMEOUT},
    {"drain-timeout", required_argument, 0, O_DRAIN},
    {"api-keys", required_argument, 0, O_KEYS},
    {"require-api-key", no_argument, 0, O_REQKEY},
    {"req-limit", required_argument, 0, O_REQLIMIT},
    {"ssl-cert", required_argument, 0, O_CERT},
    {"ssl-key", required_argument, 0, O_KEY},
    {"max-connections-per-ip", required_argument, 0, O_PERIP},
    {"connection-timeout", required_argument, 0, O_CTIMEOUT},
    {"trusted-proxies", required_argument, 0, O_TRUSTED},
    {"access-log", required_argument, 0, O_ALOG},
    {"access-log-format", required_argument, 0, O_ALOGFMT},
    {"metrics-token", required_argument, 0, O_MTOKEN},
    {"metrics-token-file", required_argument, 0, O_MTOKENFILE},
    {"quiet", no_argument, 0, 'q'},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

#define MAX_MODELS 16

static int sig_pipe[2] = {-1, -1};

/* The environment's options (TERN_SERVE_<LONG NAME>), put before the command line's as
 * "--name=value" (a flag: "--name"), each only when the command line does not give its option:
 * the command line wins, --model included. Returns the new argv (malloc'd, its strings in
 * *strs) with *n_env options from the environment after argv[0]; NULL on a bad flag value. */
static char **env_argv(int argc, char **argv, int *new_argc, int *n_env, char ***strs, int *n_strs) {
    const int n_opts = (int)(sizeof long_opts / sizeof long_opts[0]) - 1;
    char given[sizeof long_opts / sizeof long_opts[0]] = {0};
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "m:w:t:b:p:qh", long_opts, NULL)) != -1)
        for (int i = 0; i < n_opts; i++)
            if (long_opts[i].val == c) given[i] = 1;
    opterr = 1;
    optind = 1;
    size_t cap = (size_t)argc + 8;
    char **out = malloc((cap + 1) * sizeof *out);
    *strs = NULL;
    *n_strs = 0;
    if (!out) return NULL;
    int k = 0;
    out[k++] = argv[0];
    for (int i = 0; i < n_opts; i++) {
        if (given[i] || !strcmp(long_opts[i].name, "help")) continue;
        char var[64] = "TERN_SERVE_";
        size_t l = strlen(var);
        for (const char *p = long_opts[i].name; *p && l + 1 < sizeof var; p++)
            var[l++] = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
        var[l] = 0;
        const char *v = getenv(var);
        if (!v) continue;
        if (long_opts[i].has_arg == no_argument) {
            if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !*v) continue;
            if (strcmp(v, "1") && strcasecmp(v, "true") && strcasecmp(v, "yes")) {
                fprintf(stderr, "tern serve: %s=%s: a flag is 1, true, yes (on) or 0, false, no (off)\n", var, v);
                goto fail;
            }
        }
        /* --model: several specs separated by spaces */
        const char *p = v;
        do {
            size_t len = strlen(p);
            if (long_opts[i].val == 'm') {
                while (*p == ' ') p++;
                len = strcspn(p, " ");
                if (!len) break;
            }
            size_t sz = strlen(long_opts[i].name) + len + 4;
            char *a = malloc(sz), **ns = realloc(*strs, (size_t)(*n_strs + 1) * sizeof *ns);
            if (ns) *strs = ns;
            if (!a || !ns) {
                free(a);
                goto fail;
            }
            if (long_opts[i].has_arg == no_argument) snprintf(a, sz, "--%s", long_opts[i].name);
            else snprintf(a, sz, "--%s=%.*s", long_opts[i].name, (int)len, p);
            (*strs)[(*n_strs)++] = a;
            if ((size_t)k + (size_t)argc >= cap) {
                char **no = realloc(out, (cap * 2 + 1) * sizeof *out);
                if (!no) goto fail;
                out = no;
                cap *= 2;
            }
            out[k++] = a;
            p += len;
        } while (long_opts[i].val == 'm' && *p);
    }
    *n_env = k - 1;
    for (int i = 1; i < argc; i++) out[k++] = argv[i];
    out[k] = NULL;
    *new_argc = k;
    return out;
fail:
    free(out);
    return NULL;
}

/* The token of --metrics-token-file: its first line, without the newline. */
static char *read_token(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "tern serve: --metrics-token-file %s: cannot open (%s)\n", path, strerror(errno));
        return NULL;
    }
    char line[1024];
    char *tok = NULL;
    if (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0]) tok = strdup(line);
    }
    fclose(f);
    if (!tok) fprintf(stderr, "tern serve: --metrics-token-file %s: no token on its first line\n", path);
    return tok;
}

static void on_signal(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (write(sig_pipe[1], &b, 1) < 0) { /* nothing to do in a handler */ }
    errno = saved;
}

static int cmd_serve_args(int argc, char **argv, int n_env);

int cmd_serve(int argc, char **argv) {
    int new_argc = 0, n_env = 0, n_strs = 0;
    char **strs = NULL;
    char **nargv = env_argv(argc, argv, &new_argc, &n_env, &strs, &n_strs);
    int rc = nargv ? cmd_serve_args(new_argc, nargv, n_env) : 2;
    for (int i = 0; i < n_strs; i++) free(strs[i]);
    free(strs);
    free(nargv);
    return rc;
}

static int cmd_serve_args(int argc, char **argv, int n_env) {
    const char *C = "serve";
    char *token_buf = NULL;
    const char *token_file = NULL;
    int token_env = 0;
    engine_model_spec_t specs[MAX_MODELS];
    char *spec_buf[MAX_MODELS];
    int n_specs = 0, quiet = 0, ok = 1, c, drain_s = 60, body = 1 << 20, file_size = 10 << 20, unzipped = 100 << 20, workers_given = 0;
    engine_options_t eo;
    memset(&eo, 0, sizeof eo);
    eo.model_options = tern_model_default_options();
    eo.translator_options = tern_translator_default_options();
    eo.search = tern_search_default_params();
    eo.workers = 1;
    eo.max_queue = 4096;
    eo.cross_batching = 1;
    server_options_t so = server_default_options();
    optind = 1;
    while (ok && (c = getopt_long(argc, argv, "m:w:t:b:p:qh", long_opts, NULL)) != -1) {
        switch (c) {
        case 'm': {
            const char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || !eq[1] || eq - optarg > 60) {
                fprintf(stderr, "tern serve: --model expects SRC-TGT=DIR (e.g. en-de=models/en-de; NAME=DIR for a "
                        "multilingual model), got '%s'\n", optarg);
                ok = 0;
            } else if (n_specs == MAX_MODELS) {
                fprintf(stderr, "tern serve: at most %d models\n", MAX_MODELS);
                ok = 0;
            } else {
                spec_buf[n_specs] = strndup(optarg, (size_t)(eq - optarg));
                specs[n_specs].name = spec_buf[n_specs];
                specs[n_specs].dir = eq + 1;
                n_specs++;
            }
            break;
        }
        case O_COMPUTE:
            if (!strcmp(optarg, "auto") || !strcmp(optarg, "default")) eo.model_options.compute_type = TERN_COMPUTE_AUTO;
            else if (!strcmp(optarg, "float32")) eo.model_options.compute_type = TERN_COMPUTE_FLOAT32;
            else if (!strcmp(optarg, "int8")) eo.model_options.compute_type = TERN_COMPUTE_INT8;
            else {
                fprintf(stderr, "tern serve: --compute-type is auto, float32 or int8, got '%s'\n", optarg);
                ok = 0;
            }
            break;
        case 'w':
            ok = cli_int(C, "--workers", optarg, 1, 256, &eo.workers);
            workers_given = 1;
            break;
        case 't': ok = cli_int(C, "--threads", optarg, 1, 256, &eo.translator_options.threads_per_worker); break;
        case 'b': ok = cli_int(C, "--beam-size", optarg, 1, 1024, &eo.search.beam_size), eo.search_set |= SP_BEAM; break;
        case O_LP: ok = cli_float(C, "--length-penalty", optarg, 0, 100, &eo.search.length_penalty), eo.search_set |= SP_LP; break;
        case O_MAXDEC:
            ok = cli_int(C, "--max-decoding-length", optarg, 1, 1 << 20, &eo.search.max_decoding_length);
            eo.search_set |= SP_MAXDEC;
            break;
        case O_MBT: ok = cli_int(C, "--max-batch-tokens", optarg, 1, 1 << 24, &eo.translator_options.max_batch_tokens); break;
        case O_MBS: ok = cli_int(C, "--max-batch-size", optarg, 0, 1 << 24, &eo.translator_options.max_batch_size); break;
        case O_NO_CROSS: eo.cross_batching = 0; break;
        case O_MAXQ: ok = cli_int(C, "--max-queue", optarg, 1, 1 << 24, &eo.max_queue); break;
        case O_MAXBODY: ok = cli_int(C, "--max-body", optarg, 1, 1 << 30, &body); break;
        case O_MAXFILE: ok = cli_int(C, "--max-file-size", optarg, 1, 1 << 30, &file_size); break;
        case O_MAXUNZIP: ok = cli_int(C, "--max-unzipped", optarg, 1, 1 << 30, &unzipped); break;
        case O_MAXENTRIES: ok = cli_int(C, "--max-zip-entries", optarg, 1, 1 << 20, &so.max_zip_entries); break;
        case O_MAXFILES: ok = cli_int(C, "--max-files", optarg, 1, 1 << 20, &so.max_files); break;
        case O_FILELIFE: ok = cli_int(C, "--file-lifetime", optarg, 1, 1 << 30, &so.file_lifetime_s); break;
        case O_CHARS: ok = cli_int(C, "--char-limit", optarg, -1, 1 << 30, &so.char_limit); break;
        case O_BATCHLIM: ok = cli_int(C, "--batch-limit", optarg, -1, 1 << 24, &so.batch_limit); break;
        case O_MAXSEG: ok = cli_int(C, "--max-segments", optarg, 1, 1 << 24, &so.max_segments); break;
        case O_NOSPLIT: so.split_sentences = 0; break;
        case O_MAXBEAM: ok = cli_int(C, "--max-beam", optarg, 1, 1024, &so.max_beam); break;
        case O_HOST: so.host = optarg; break;
        case 'p': ok = cli_int(C, "--port", optarg, 0, 65535, &so.port); break;
        case O_MAXCONN: ok = cli_int(C, "--max-connections", optarg, 1, 1 << 16, &so.max_connections); break;
        case O_TIMEOUT: ok = cli_int(C, "--timeout", optarg, 1, 1 << 20, &so.timeout_s); break;
        case O_CTIMEOUT: ok = cli_int(C, "--connection-timeout", optarg, 1, 1 << 20, &so.timeout_s); break;
        case O_PERIP: ok = cli_int(C, "--max-connections-per-ip", optarg, 0, 1 << 16, &so.per_ip_connections); break;
        case O_CERT: so.ssl_cert = optarg; break;
        case O_KEY: so.ssl_key = optarg; break;
        case O_TRUSTED: so.trusted_proxies = optarg; break;
        case O_ALOG: so.access_log = optarg; break;
        case O_ALOGFMT:
            if (!strcmp(optarg, "combined")) so.access_log_json = 0;
            else if (!strcmp(optarg, "json")) so.access_log_json = 1;
            else {
                fprintf(stderr, "tern serve: --access-log-format is combined or json, got '%s'\n", optarg);
                ok = 0;
            }
            break;
        case O_MTOKEN:
            if (!*optarg) {
                fprintf(stderr, "tern serve: --metrics-token: empty\n");
                ok = 0;
            }
            so.metrics_token = optarg;
            break;
        case O_MTOKENFILE: /* read once the options parse (--help first) */
            token_file = optarg;
            token_env = optind - 1 <= n_env;
            break;
        case O_DRAIN: ok = cli_int(C, "--drain-timeout", optarg, 0, 1 << 20, &drain_s); break;
        case O_KEYS: so.api_keys_file = optarg; break;
        case O_REQKEY: so.require_api_key = 1; break;
        case O_REQLIMIT: ok = cli_int(C, "--req-limit", optarg, 0, 1 << 24, &so.req_limit); break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default: ok = 0; break;
        }
        if (!ok && optind - 1 <= n_env && optind >= 2) { /* the bad value came from the environment */
            char var[64] = "TERN_SERVE_";
            size_t l = strlen(var);
            for (const char *p = argv[optind - 1] + 2; *p && *p != '=' && l + 1 < sizeof var; p++)
                var[l++] = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
            var[l] = 0;
            fprintf(stderr, "tern serve: (the value came from the environment: %s)\n", var);
        }
    }
    if (ok && token_file && !so.metrics_token) {
        ok = (token_buf = read_token(token_file)) != NULL;
        so.metrics_token = token_buf;
        if (!ok && token_env) fprintf(stderr, "tern serve: (the value came from the environment: "
                                              "TERN_SERVE_METRICS_TOKEN_FILE)\n");
    }
    int rc = 2;
    if (ok && n_specs == 0) {
        fprintf(stderr, "tern serve: no model (--model SRC-TGT=DIR)\n");
        ok = 0;
    }
    if (ok && optind < argc) {
        fprintf(stderr, "tern serve: unexpected argument '%s'\n", argv[optind]);
        ok = 0;
    }
    if (ok && so.max_segments > eo.max_queue) so.max_segments = eo.max_queue;
    if (ok && so.require_api_key && !so.api_keys_file) {
        fprintf(stderr, "tern serve: --require-api-key needs --api-keys FILE\n");
        ok = 0;
    }
    if (!ok) {
        fprintf(stderr, "see tern serve --help\n");
        goto out;
    }
    so.max_body = (size_t)body;
    so.max_file_size = (size_t)file_size;
    so.max_unzipped = (size_t)unzipped;
    /* The cores are shared by every translator of every model. Without -w, translators rather
     * than intra-op threads: a small batch (one request's sentences, or a light load) runs at
     * less than half of one thread's efficiency on two OpenMP threads and far worse when other processes
     * hold the cores, while a large batch loses nothing on one thread per translator
     * (docs/serving.md, "Load"). At most 8 per model: each has its own workspace, and batches
     * across requests shrink as the queue is split between more of them. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    if (!workers_given) {
        int t = eo.translator_options.threads_per_worker > 0 ? eo.translator_options.threads_per_worker : 1;
        long w = cores / ((long)t * n_specs);
        eo.workers = w < 1 ? 1 : w > 8 ? 8 : (int)w;
    }
    if (eo.translator_options.threads_per_worker == 0) {
        long t = cores / ((long)eo.workers * n_specs);
        eo.translator_options.threads_per_worker = t > 0 ? (int)t : 1;
    }
    so.quiet = quiet;
    if (so.max_decoding_length < eo.search.max_decoding_length)
        so.max_decoding_length = eo.search.max_decoding_length;
    tern_set_log_level(quiet ? TERN_LOG_ERROR : TERN_LOG_WARN);

    /* Our threads (workers, HTTP) inherit a mask that blocks these signals; the main thread
     * unblocks them once they run, with handlers that only write the signal's number into a pipe
     * it reads. A library thread started before (OpenBLAS's) may still take one: the handler runs
     * there just as well, instead of the default action that would kill the process. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    if (pipe(sig_pipe) != 0) {
        fprintf(stderr, "tern serve: cannot create a pipe\n");
        rc = 1;
        goto out;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    rc = 1;
    engine_t *engine = NULL;
    server_t *server = NULL;
    /* SRC-TGT=NAME: an installed model by name, as -m NAME elsewhere (cli_models.c) */
    static char dir_buf[MAX_MODELS][4096];
    for (int i = 0; i < n_specs; i++)
        if (!(specs[i].dir = cli_model_dir(C, specs[i].dir, dir_buf[i], sizeof dir_buf[i]))) goto out;
    tern_status_t st = engine_create(&engine, specs, n_specs, &eo);
    if (st) {
        cli_fail(C, st);
        goto out;
    }
    for (int i = 0; i < n_specs; i++) { /* a model of one pair says which: SRC-TGT */
        int nl = 0;
        engine_model_languages(engine_model_at(engine, i), &nl);
        if (!nl && !strchr(specs[i].name, '-')) {
            fprintf(stderr, "tern serve: --model %s=%s: a model of one language pair is named SRC-TGT (e.g. "
                    "en-de=models/en-de); only a multilingual model (M2M-100, NLLB) takes any NAME\n", specs[i].name,
                    specs[i].dir);
            engine_free(engine);
            goto out;
        }
    }
    if ((st = server_start(&server, engine, &so))) {
        cli_fail(C, st);
        engine_free(engine);
        goto out;
    }
    if (!quiet) {
        for (int i = 0; i < n_specs; i++)
            fprintf(stderr, "tern serve: model %s from %s (%d translator%s x %d thread%s)\n", specs[i].name,
                    specs[i].dir, eo.workers, eo.workers == 1 ? "" : "s", eo.translator_options.threads_per_worker,
                    eo.translator_options.threads_per_worker == 1 ? "" : "s");
    }
    fprintf(stderr, "tern serve: listening on %s://%s%s%s:%d\n", so.ssl_cert ? "https" : "http",
            strchr(so.host, ':') && so.host[0] != '[' ? "[" : "", so.host,
            strchr(so.host, ':') && so.host[0] != '[' ? "]" : "", server_port(server));
    fflush(stderr);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    for (;;) {
        unsigned char b;
        ssize_t got = read(sig_pipe[0], &b, 1);
        if (got < 0 && errno == EINTR) continue;
        if (got != 1) break;
        int sig = b;
        if (sig == SIGHUP) {
            if (!quiet) fprintf(stderr, "tern serve: SIGHUP: reloading the models\n");
            server_reload(server);
            st = engine_reload(engine);
            if (st) fprintf(stderr, "tern serve: reload failed, the old models keep serving: %s\n", tern_last_error());
            else if (!quiet) fprintf(stderr, "tern serve: models reloaded\n");
            continue;
        }
        if (!quiet) fprintf(stderr, "tern serve: %s: draining\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        int left = server_drain(server, drain_s);
        if (left) fprintf(stderr, "tern serve: %d requests still in flight after %d s; closing them\n", left, drain_s);
        rc = left ? 1 : 0;
        break;
    }
    server_stop(server);
    engine_free(engine);
    if (!quiet) fprintf(stderr, "tern serve: stopped\n");
out:
    if (sig_pipe[0] >= 0) close(sig_pipe[0]), close(sig_pipe[1]);
    for (int i = 0; i < n_specs; i++) free(spec_buf[i]);
    free(token_buf);
    return rc;
}
