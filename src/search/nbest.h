/*
 * nbest.h — n-best list files, as evidence (LMBR, MBR) or as the paths of restricted decoding.
 *
 * Formats, detected per line:
 *   Tern       "i ||| hypothesis ||| score"
 *   Moses      "i ||| hypothesis ||| feature values ||| score" (the last field is the total score)
 *   plain      "hypothesis" (no "|||"): sentence = the line's number (from 0), score 0
 * Sentence indices count from 0 and may come in any order; a sentence without entries has K = 0.
 * Errors name the file and line.
 */
#ifndef TERN_SEARCH_NBEST_H
#define TERN_SEARCH_NBEST_H

#include "base/base.h"

typedef struct {
    char **text;   /* (K) hypotheses, as in the file (trimmed) */
    float *score;  /* (K) */
    long *line;    /* (K) line numbers in the file (from 1) */
    int K, cap;
} nbest_sent_t;

typedef struct {
    char *path;
    nbest_sent_t *sent; /* (n) */
    int n;
    long lines;
} nbest_file_t;

tern_status_t nbest_read(nbest_file_t *f, const char *path);
void nbest_free(nbest_file_t *f);

#endif
