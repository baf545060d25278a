/* quality.c — quality estimates from token log-probabilities (see quality.h). */
#include "serve/quality.h"

#include <stdlib.h>
#include <string.h>

static const char BOUNDARY[] = "\xE2\x96\x81"; /* U+2581 */

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

/* Matches piece's surface text at text[*at] (its boundary mark read as white space, a byte piece
 * "<0xNN>" as its byte); advances *at. 1 when it matched. */
static int match_piece(const char *piece, const char *text, size_t *at) {
    size_t p = *at;
    if (strlen(piece) == 6 && !strncmp(piece, "<0x", 3) && piece[5] == '>') {
        unsigned v = (unsigned)strtoul(piece + 3, NULL, 16);
        if ((unsigned char)text[p] != v) return 0;
        *at = p + 1;
        return 1;
    }
    for (const char *s = piece; *s;) {
        if (!strncmp(s, BOUNDARY, 3)) {
            while (is_space(text[p])) p++;
            s += 3;
            continue;
        }
        if (text[p] != *s) return 0;
        p++, s++;
    }
    *at = p;
    return 1;
}

int quality_estimate(const tern_token_scores_t *ts, const char *text, double *score, quality_word_t **words,
                     int *n_words) {
    *score = 0, *words = NULL, *n_words = 0;
    if (!ts || ts->num_tokens <= 0) return 0;
    double sum = 0;
    for (int t = 0; t < ts->num_tokens; t++) sum += ts->log_probs[t];
    *score = sum / ts->num_tokens;
    int T = ts->num_tokens - 1; /* the end token is no word */
    if (T <= 0) return 0;
    quality_word_t *w = malloc((size_t)T * sizeof *w);
    if (!w) return -1;
    const char *txt = text ? text : "";
    size_t len = strlen(txt), at = 0;
    int nw = 0;
    for (int t = 0; t < T;) {
        int e = t + 1;
        while (e < T && strncmp(ts->tokens[e], BOUNDARY, 3)) e++;
        double s = 0;
        for (int k = t; k < e; k++) s += ts->log_probs[k];
        while (at < len && is_space(txt[at])) at++;
        size_t start = at, p = at;
        int ok = 1;
        for (int k = t; k < e && ok; k++) ok = match_piece(ts->tokens[k], txt, &p);
        if (ok) { /* the word's own bytes: the white space its first piece's mark matched is not its */
            size_t b = start;
            while (b < p && is_space(txt[b])) b++;
            start = b;
        } else { /* not found as pieces: up to the next white space */
            p = at;
            while (p < len && !is_space(txt[p])) p++;
        }
        if (p > len) p = len;
        at = p;
        w[nw++] = (quality_word_t){start, p, (float)(s / (e - t))};
        t = e;
    }
    *words = w;
    *n_words = nw;
    return 0;
}
