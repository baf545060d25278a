/* nbest.c — reading n-best list files (nbest.h). */
#include "search/nbest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *trim(char *s, char *e) {
    while (s < e && (*s == ' ' || *s == '\t')) s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) e--;
    *e = 0;
    return s;
}

static tern_status_t add(nbest_file_t *f, long idx, const char *text, float score, long line) {
    if (idx >= f->n) {
        long n = f->n ? f->n : 16;
        while (n <= idx) n *= 2;
        nbest_sent_t *s = realloc(f->sent, (size_t)n * sizeof *s);
        if (!s) return tern_error(TERN_ERR_NOMEM, "out of memory");
        memset(s + f->n, 0, (size_t)(n - f->n) * sizeof *s);
        f->sent = s;
        f->n = (int)n;
    }
    nbest_sent_t *s = &f->sent[idx];
    if (s->K == s->cap) {
        int cap = s->cap ? s->cap * 2 : 4;
        char **t = realloc(s->text, (size_t)cap * sizeof *t);
        if (t) s->text = t;
        float *sc = realloc(s->score, (size_t)cap * sizeof *sc);
        if (sc) s->score = sc;
        long *ln = realloc(s->line, (size_t)cap * sizeof *ln);
        if (ln) s->line = ln;
        if (!t || !sc || !ln) return tern_error(TERN_ERR_NOMEM, "out of memory");
        s->cap = cap;
    }
    s->text[s->K] = strdup(text);
    if (!s->text[s->K]) return tern_error(TERN_ERR_NOMEM, "out of memory");
    s->score[s->K] = score;
    s->line[s->K] = line;
    s->K++;
    return TERN_OK;
}

tern_status_t nbest_read(nbest_file_t *f, const char *path) {
    memset(f, 0, sizeof *f);
    FILE *in = fopen(path, "r");
    if (!in) return tern_error(TERN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    f->path = strdup(path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long ln = 0, max_idx = -1;
    tern_status_t st = TERN_OK;
    while ((len = getline(&line, &cap, in)) >= 0) {
        ln++;
        char *end = line + len;
        char *fields[64];
        int nf = 0;
        char *p = line;
        for (;;) {
            char *sep = strstr(p, "|||");
            if (!sep || nf == 63) break;
            fields[nf++] = p;
            *sep = 0;
            p = sep + 3;
        }
        fields[nf++] = p;
        long idx;
        const char *text;
        float score = 0;
        if (nf == 1) {
            idx = ln - 1;
            text = trim(fields[0], end);
        } else if (nf >= 3) {
            char *ie = fields[0] + strlen(fields[0]);
            char *is = trim(fields[0], ie), *q;
            errno = 0;
            idx = strtol(is, &q, 10);
            if (q == is || *q || errno || idx < 0) {
                st = tern_error(TERN_ERR_FORMAT, "%s line %ld: the sentence index '%s' is not a number >= 0", path, ln, is);
                break;
            }
            text = trim(fields[1], fields[1] + strlen(fields[1]));
            char *last = nf - 1 == 2 ? fields[2] : fields[nf - 1];
            char *le = nf - 1 == 2 ? end : last + strlen(last);
            char *ss = trim(last, le);
            errno = 0;
            score = strtof(ss, &q);
            if (q == ss || *q || errno) {
                st = tern_error(TERN_ERR_FORMAT, "%s line %ld: the score '%s' is not a number", path, ln, ss);
                break;
            }
        } else {
            st = tern_error(TERN_ERR_FORMAT, "%s line %ld: expected 'i ||| hypothesis ||| score' (or Moses' "
                                            "'i ||| hypothesis ||| features ||| score')", path, ln);
            break;
        }
        if (idx > 100000000) {
            st = tern_error(TERN_ERR_FORMAT, "%s line %ld: sentence index %ld is too large", path, ln, idx);
            break;
        }
        if ((st = add(f, idx, text, score, ln))) break;
        if (idx > max_idx) max_idx = idx;
    }
    free(line);
    fclose(in);
    f->lines = ln;
    if (st) {
        nbest_free(f);
        return st;
    }
    f->n = (int)(max_idx + 1);
    return TERN_OK;
}

void nbest_free(nbest_file_t *f) {
    for (int i = 0; f->sent && i < f->n; i++) {
        for (int k = 0; k < f->sent[i].K; k++) free(f->sent[i].text[k]);
        free(f->sent[i].text), free(f->sent[i].score), free(f->sent[i].line);
    }
    free(f->sent);
    free(f->path);
    memset(f, 0, sizeof *f);
}
