/* cli_extras.c — the files of `tern translate` that steer the search (--suppress, --target-prefix,
 * --constraints, --restrict-to, --lmbr-evidence) read into the request API's in-memory form
 * (tern_text_t, tern_source_extras_t), and the file translation over tern_translate_stream():
 * lines in from a FILE, results out as lines ("i ||| hypothesis ||| score" for n-best lists or
 * --scores). Files of one line per input are read in step with the input; n-best files are read
 * whole. A file whose lines do not match the input is warned about naming the file and line, and
 * every input line is still translated (one output line per input line); each entry carries its
 * origin ("FILE line N") so that the library's warnings about it (an unknown piece, an entry too
 * long) name it too. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "base/base.h"
#include "search/nbest.h"

typedef struct {
    FILE *f;
    const char *path;
    long lines;
    int eof;
    char *line; /* its current line (each file its own: a line stays valid while the next file is read) */
    size_t cap;
} line_file_t;

struct cli_extras {
    tern_text_t *suppress;       /* (n_suppress) */
    char **suppress_text;
    int n_suppress, has_suppress;
    line_file_t prefix, cons;
    nbest_file_t restrict_nb;
    int has_restrict;
    nbest_file_t *ev;            /* (nev) */
    int nev;
    /* the current line's extras */
    tern_source_extras_t e;
    char prefix_origin[1100], cons_origin[1100];
    char *cons_text;             /* the JSON line, whose strings the phrases point into */
    cJSON *cons_json;
    const char **phrases;
    tern_text_t *restrict_to;
    const tern_text_t **evidence; /* (nev) */
    int *ev_count;
    tern_text_t **ev_texts;       /* (nev) */
    char **origins;               /* "FILE line N" of the current n-best entries */
    int n_origins, origins_cap;
};

static tern_status_t open_lines(line_file_t *lf, const char *path) {
    lf->path = path;
    if (!path) return TERN_OK;
    lf->f = fopen(path, "r");
    if (!lf->f) return tern_error(TERN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    return TERN_OK;
}

static tern_status_t read_suppress(cli_extras_t *x, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return tern_error(TERN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    tern_status_t st = TERN_OK;
    char *line = NULL, origin[1100];
    size_t cap = 0;
    ssize_t r;
    long ln = 0;
    int scap = 0;
    x->has_suppress = 1;
    while (!st && (r = getline(&line, &cap, f)) >= 0) {
        ln++;
        while (r > 0 && (line[r - 1] == '\n' || line[r - 1] == '\r')) line[--r] = 0;
        if (x->n_suppress == scap) {
            scap = scap ? 2 * scap : 16;
            tern_text_t *t = realloc(x->suppress, (size_t)scap * sizeof *t);
            if (t) x->suppress = t;
            char **s = realloc(x->suppress_text, (size_t)scap * 2 * sizeof *s);
            if (s) x->suppress_text = s;
            if (!t || !s) st = tern_error(TERN_ERR_NOMEM, "out of memory");
        }
        snprintf(origin, sizeof origin, "%s line %ld", path, ln);
        char *text = st ? NULL : strdup(line), *org = st ? NULL : strdup(origin);
        if (!st && (!text || !org)) st = tern_error(TERN_ERR_NOMEM, "out of memory");
        if (st) {
            free(text), free(org);
            break;
        }
        x->suppress_text[2 * x->n_suppress] = text;
        x->suppress_text[2 * x->n_suppress + 1] = org;
        x->suppress[x->n_suppress++] = (tern_text_t){text, 0.0f, org};
    }
    free(line);
    fclose(f);
    return st;
}

tern_status_t cli_extras_open(cli_extras_t **out, const cli_extras_files_t *files) {
    *out = NULL;
    if (!files->suppress && !files->target_prefix && !files->restrict_to && !files->constraints && files->n_evidence <= 0)
        return TERN_OK;
    cli_extras_t *x = calloc(1, sizeof *x);
    if (!x) return tern_error(TERN_ERR_NOMEM, "out of memory");
    x->e.struct_size = sizeof x->e;
    tern_status_t st = TERN_OK;
    if (files->suppress) st = read_suppress(x, files->suppress);
    if (!st) st = open_lines(&x->prefix, files->target_prefix);
    if (!st) st = open_lines(&x->cons, files->constraints);
    if (!st && files->restrict_to && !(st = nbest_read(&x->restrict_nb, files->restrict_to))) x->has_restrict = 1;
    if (!st && files->n_evidence > 0) {
        int n = files->n_evidence;
        x->ev = calloc((size_t)n, sizeof *x->ev);
        x->evidence = calloc((size_t)n, sizeof *x->evidence);
        x->ev_count = calloc((size_t)n, sizeof *x->ev_count);
        x->ev_texts = calloc((size_t)n, sizeof *x->ev_texts);
        if (!x->ev || !x->evidence || !x->ev_count || !x->ev_texts) st = tern_error(TERN_ERR_NOMEM, "out of memory");
        for (int k = 0; k < n && !st; k++)
            if (!(st = nbest_read(&x->ev[k], files->evidence[k]))) x->nev++;
    }
    if (st) {
        cli_extras_close(x, -1);
        return st;
    }
    *out = x;
    return TERN_OK;
}

const tern_text_t *cli_extras_suppress(const cli_extras_t *x, int *n) {
    *n = x ? x->n_suppress : 0;
    if (!x || !x->has_suppress) return NULL;
    static const tern_text_t none = {"", 0.0f, NULL};
    return x->suppress ? x->suppress : &none;
}

int cli_extras_per_line(const cli_extras_t *x) { return x && (x->prefix.f || x->cons.f || x->has_restrict || x->nev); }

/* The next line of a per-input file (its own buffer; (NULL at its end, warned about once). */
static const char *next_line(cli_extras_t *x, line_file_t *lf, long i, const char *what) {
    if (!lf->f || lf->eof) return NULL;
    ssize_t r = getline(&lf->line, &lf->cap, lf->f);
    if (r < 0) {
        lf->eof = 1;
        TERN_WARN("%s: %ld lines, but the input has more: input line %ld on are decoded without %s", lf->path, lf->lines,
                  i + 1, what);
        return NULL;
    }
    lf->lines++;
    while (r > 0 && (lf->line[r - 1] == '\n' || lf->line[r - 1] == '\r')) lf->line[--r] = 0;
    return lf->line;
}

/* The JSON list of phrases of input line i: a malformed line or a non-string entry is warned about
 * (file, line) and left out (as a NULL phrase, so the library's messages count entries as the
 * file does). */
static tern_status_t line_constraints(cli_extras_t *x, long i) {
    const char *line = next_line(x, &x->cons, i, "constraints");
    if (!line) return TERN_OK;
    long ln = x->cons.lines;
    snprintf(x->cons_origin, sizeof x->cons_origin, "%s line %ld", x->cons.path, ln);
    x->e.constraints_origin = x->cons_origin;
    const char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) return TERN_OK;
    cJSON *j = cJSON_Parse(line);
    if (!j || !cJSON_IsArray(j)) {
        TERN_WARN("%s line %ld: not a JSON list of strings: decoded without constraints", x->cons.path, ln);
        cJSON_Delete(j);
        return TERN_OK;
    }
    int n = cJSON_GetArraySize(j);
    x->phrases = calloc((size_t)(n ? n : 1), sizeof *x->phrases);
    if (!x->phrases) {
        cJSON_Delete(j);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    x->cons_json = j;
    for (int k = 0; k < n; k++) {
        cJSON *e = cJSON_GetArrayItem(j, k);
        if (!cJSON_IsString(e)) {
            TERN_WARN("%s line %ld: constraint %d is not a string: left out", x->cons.path, ln, k + 1);
            continue;
        }
        x->phrases[k] = e->valuestring;
    }
    x->e.constraints = x->phrases;
    x->e.num_constraints = n;
    return TERN_OK;
}

/* "FILE line N" of n-best entries, kept until the next input line */
static const char *origin_of(cli_extras_t *x, const char *path, long line) {
    if (x->n_origins == x->origins_cap) {
        int cap = x->origins_cap ? 2 * x->origins_cap : 64;
        char **o = realloc(x->origins, (size_t)cap * sizeof *o);
        if (!o) return NULL;
        x->origins = o;
        x->origins_cap = cap;
    }
    char buf[1100];
    snprintf(buf, sizeof buf, "%s line %ld", path, line);
    char *s = strdup(buf);
    if (s) x->origins[x->n_origins++] = s;
    return s;
}

/* sentence i of f as tern_text_t entries (*K of them; NULL when none) */
static tern_status_t nbest_texts(cli_extras_t *x, const nbest_file_t *f, long i, tern_text_t **out, int *K) {
    *out = NULL;
    *K = i < f->n ? f->sent[i].K : 0;
    if (*K == 0) return TERN_OK;
    const nbest_sent_t *s = &f->sent[i];
    tern_text_t *t = calloc((size_t)*K, sizeof *t);
    if (!t) return tern_error(TERN_ERR_NOMEM, "out of memory");
    for (int k = 0; k < *K; k++) {
        const char *o = origin_of(x, f->path, s->line[k]);
        if (!o) {
            free(t);
            return tern_error(TERN_ERR_NOMEM, "out of memory");
        }
        t[k] = (tern_text_t){s->text[k], s->score[k], o};
    }
    *out = t;
    return TERN_OK;
}

static void line_free(cli_extras_t *x) {
    cJSON_Delete(x->cons_json);
    x->cons_json = NULL;
    free(x->phrases), x->phrases = NULL;
    free(x->restrict_to), x->restrict_to = NULL;
    for (int k = 0; k < x->nev; k++) free(x->ev_texts[k]), x->ev_texts[k] = NULL;
    for (int k = 0; k < x->n_origins; k++) free(x->origins[k]);
    x->n_origins = 0;
    memset(&x->e, 0, sizeof x->e);
    x->e.struct_size = sizeof x->e;
}

tern_status_t cli_extras_line(cli_extras_t *x, long i, const tern_source_extras_t **out) {
    *out = NULL;
    if (!cli_extras_per_line(x)) return TERN_OK;
    line_free(x);
    tern_status_t st = TERN_OK;
    const char *p = next_line(x, &x->prefix, i, "a prefix");
    if (p) {
        snprintf(x->prefix_origin, sizeof x->prefix_origin, "%s line %ld", x->prefix.path, x->prefix.lines);
        x->e.target_prefix = p;
        x->e.prefix_origin = x->prefix_origin;
    }
    if ((st = line_constraints(x, i))) return st;
    if (x->has_restrict) {
        int K;
        if ((st = nbest_texts(x, &x->restrict_nb, i, &x->restrict_to, &K))) return st;
        if (K == 0)
            TERN_WARN("%s: no hypothesis for input line %ld: decoded without restriction", x->restrict_nb.path, i + 1);
        x->e.restrict_to = x->restrict_to;
        x->e.num_restrict = K;
    }
    for (int k = 0; k < x->nev; k++) {
        if ((st = nbest_texts(x, &x->ev[k], i, &x->ev_texts[k], &x->ev_count[k]))) return st;
        if (x->ev_count[k] == 0) TERN_WARN("%s: no evidence for input line %ld", x->ev[k].path, i + 1);
        x->evidence[k] = x->ev_texts[k];
    }
    if (x->nev) {
        x->e.lmbr_evidence = x->evidence;
        x->e.lmbr_evidence_count = x->ev_count;
    }
    *out = &x->e;
    return TERN_OK;
}

/* n-best entries for sentences the input does not have: a warning naming the first such line */
static void warn_beyond(const nbest_file_t *f, long lines, const char *what) {
    long first = -1;
    int count = 0;
    for (long i = lines; i < f->n; i++)
        for (int k = 0; k < f->sent[i].K; k++) {
            count++;
            if (first < 0 || f->sent[i].line[k] < first) first = f->sent[i].line[k];
        }
    if (count)
        TERN_WARN("%s line %ld: %s for sentence %d and beyond, but the input has %ld lines: %d entries ignored",
                  f->path, first, what, (int)lines, lines, count);
}

static void close_lines(cli_extras_t *x, line_file_t *lf, long lines) {
    if (!lf->f) return;
    if (lines >= 0 && !lf->eof && getline(&lf->line, &lf->cap, lf->f) >= 0)
        TERN_WARN("%s: more lines than the input's %ld: line %ld on are ignored", lf->path, lines, lines + 1);
    fclose(lf->f);
    free(lf->line);
}

void cli_extras_close(cli_extras_t *x, long lines) {
    if (!x) return;
    close_lines(x, &x->cons, lines);
    close_lines(x, &x->prefix, lines);
    if (lines >= 0) {
        if (x->has_restrict) warn_beyond(&x->restrict_nb, lines, "hypotheses");
        for (int k = 0; k < x->nev; k++) warn_beyond(&x->ev[k], lines, "evidence");
    }
    line_free(x);
    for (int k = 0; k < 2 * x->n_suppress; k++) free(x->suppress_text[k]);
    free(x->suppress), free(x->suppress_text);
    if (x->has_restrict) nbest_free(&x->restrict_nb);
    for (int k = 0; k < x->nev; k++) nbest_free(&x->ev[k]);
    free(x->ev), free(x->evidence), free(x->ev_count), free(x->ev_texts), free(x->origins);
    free(x);
}

/* ------------------------------------------------------------------ file translation */

/* --split-sentences: the sentences read but not yet written, in order, each with the text to
 * print before its translation (the white space before it on its line) and, for the last of its
 * line, after it (the white space ending the line). */
typedef struct pending {
    struct pending *next;
    char *before, *after; /* after: NULL unless the sentence is the last of its line */
} pending_t;

typedef struct {
    FILE *in, *out;
    cli_extras_t *x;
    char *line;
    size_t cap;
    long lines;
    int nh, print_scores, write_failed;
    /* sentence splitting (split_lang NULL: off): the current line's sentences spans (n_sent), the
     * next one to hand out; the queue of those handed out and not written */
    const char *split_lang;
    size_t *spans, line_len;
    int n_sent, next_sent;
    pending_t *head, *tail;
} stream_io_t;

static int push_pending(stream_io_t *io, const char *before, size_t nb, const char *after, size_t na, int last) {
    pending_t *p = calloc(1, sizeof *p);
    if (!p || !(p->before = strndup(before, nb)) || (last && !(p->after = strndup(after, na)))) {
        if (p) free(p->before);
        free(p);
        return -1;
    }
    if (io->tail) io->tail->next = p;
    else io->head = p;
    io->tail = p;
    return 0;
}

/* The next sentence of the input (a whole line when it has fewer than two): reads a line when the
 * current one is used up; the spans are the line's without its line end. */
static int read_sentence(long line, const char **text, size_t *len, const tern_source_extras_t **ex, void *ud) {
    stream_io_t *io = ud;
    (void)line;
    *ex = NULL;
    if (io->next_sent >= io->n_sent) {
        ssize_t r = getline(&io->line, &io->cap, io->in);
        if (r < 0) return ferror(io->in) ? -1 : 0;
        io->lines++;
        size_t n = (size_t)r;
        if (n && io->line[n - 1] == '\n') n--;
        if (n && io->line[n - 1] == '\r') n--;
        io->line_len = n;
        tern_sentences_free(io->spans);
        io->spans = NULL;
        if (tern_split_sentences(io->line, n, io->split_lang, &io->spans, &io->n_sent)) return -1;
        if (io->n_sent < 2) { /* the line whole, as without splitting */
            io->n_sent = io->next_sent = 0;
            if (push_pending(io, "", 0, "", 0, 1)) return -1;
            *text = io->line;
            *len = n;
            return 1;
        }
        io->next_sent = 0;
    }
    int i = io->next_sent++, last = io->next_sent == io->n_sent;
    size_t prev = i ? io->spans[2 * i - 1] : 0, b = io->spans[2 * i], e = io->spans[2 * i + 1];
    if (push_pending(io, io->line + prev, b - prev, io->line + e, io->line_len - e, last)) return -1;
    *text = io->line + b;
    *len = e - b;
    return 1;
}

static int read_source(long line, const char **text, size_t *len, const tern_source_extras_t **ex, void *ud) {
    stream_io_t *io = ud;
    if (io->split_lang) return read_sentence(line, text, len, ex, ud);
    ssize_t r = getline(&io->line, &io->cap, io->in);
    if (r < 0) return ferror(io->in) ? -1 : 0;
    io->lines = line + 1;
    *text = io->line;
    *len = (size_t)r;
    return cli_extras_line(io->x, line, ex) ? -1 : 1;
}

/* --split-sentences: a sentence's translation between its line's white space; the line ends with
 * its last sentence. */
static int write_sentence(const tern_result_t *r, stream_io_t *io) {
    pending_t *p = io->head;
    if (!p) return 1; /* cannot happen: every result was read first */
    io->head = p->next;
    if (!io->head) io->tail = NULL;
    const char *text = r->num_hypotheses ? r->hypotheses[0] : "";
    int ok = fprintf(io->out, "%s%s", p->before, text) >= 0 && (!p->after || fprintf(io->out, "%s\n", p->after) >= 0);
    free(p->before), free(p->after), free(p);
    if (!ok) io->write_failed = 1;
    return !ok;
}

static int write_line(long line, const tern_result_t *r, void *ud) {
    stream_io_t *io = ud;
    if (io->split_lang) return write_sentence(r, io);
    for (int k = 0; k < io->nh; k++) {
        const char *text = k < r->num_hypotheses ? r->hypotheses[k] : "";
        float score = k < r->num_hypotheses && r->scores ? r->scores[k] : 0.0f;
        int ok;
        if (io->nh == 1 && !io->print_scores) ok = fprintf(io->out, "%s\n", text) >= 0;
        else ok = fprintf(io->out, "%ld ||| %s ||| %.6f\n", line, text, score) >= 0;
        if (!ok) {
            io->write_failed = 1;
            return 1;
        }
    }
    return 0;
}

tern_status_t cli_translate_file(const tern_model_t *model, const tern_translator_options_t *options,
                                 const tern_request_t *base, cli_extras_t *x, FILE *in, FILE *out, int print_scores,
                                 const char *split_lang) {
    tern_request_t req = *base;
    tern_search_params_t p = base->params ? *base->params : tern_search_default_params();
    /* scores reach the output only in n-best lists or with --scores: otherwise greedy search needs
     * no log-softmax (the argmax of the logits is the token) */
    int nbest = p.num_samples > 1 ? p.num_samples : p.num_hypotheses; /* samples: an n-best list too */
    if (nbest <= 1 && !print_scores) p.return_scores = 0;
    stream_io_t io = {in, out, x, NULL, 0, 0, nbest, print_scores, 0, split_lang, NULL, 0, 0, 0, NULL, NULL};
    if (split_lang && (nbest > 1 || print_scores || cli_extras_per_line(x))) {
        cli_extras_close(x, -1);
        return tern_error(TERN_ERR_INVALID_ARG, "--split-sentences gives one translation per line: it cannot go "
                                                "with n-best lists, --scores or per-line files");
    }
    req.params = &p;
    req.read_source = read_source;
    req.on_line = write_line;
    req.stream_data = &io;
    req.suppress = cli_extras_suppress(x, &req.num_suppress);
    tern_status_t st = tern_translate_stream(model, options, &req);
    if (io.write_failed || (!st && fflush(out) != 0)) st = tern_error(TERN_ERR_IO, "cannot write the output");
    cli_extras_close(x, st ? -1 : io.lines);
    free(io.line);
    tern_sentences_free(io.spans);
    while (io.head) {
        pending_t *p = io.head;
        io.head = p->next;
        free(p->before), free(p->after), free(p);
    }
    return st;
}
