/* cli_quality.c — `tern translate --quality[=tsv|json]`: each line's translation with its quality
 * estimate (src/serve/quality.h): "TRANSLATION<TAB>SCORE" lines, or one JSON object a line
 * {"translation", "score", "words": [{"word", "start", "end", "score"}]}. Lines are translated in
 * chunks with tern_translate() and tern_request_t.token_scores. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cjson/cJSON.h"
#include "cli.h"
#include "serve/quality.h"

#define CHUNK 256

static int write_quality(FILE *out, int json, const char *text, const tern_token_scores_t *ts) {
    double score;
    quality_word_t *w;
    int nw;
    if (quality_estimate(ts, text, &score, &w, &nw)) return -1;
    int ok;
    if (!json) {
        ok = fprintf(out, "%s\t%.6f\n", text, score) >= 0;
    } else {
        cJSON *o = cJSON_CreateObject(), *arr = cJSON_CreateArray();
        cJSON_AddStringToObject(o, "translation", text);
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
        cJSON_AddItemToObject(o, "words", arr);
        cJSON *toks = cJSON_CreateArray(), *lps = cJSON_CreateArray(); /* what the scores are made of */
        for (int t = 0; ts && t < ts->num_tokens; t++) {
            cJSON_AddItemToArray(toks, cJSON_CreateString(ts->tokens[t]));
            cJSON_AddItemToArray(lps, cJSON_CreateNumber(ts->log_probs[t]));
        }
        cJSON_AddItemToObject(o, "tokens", toks);
        cJSON_AddItemToObject(o, "token_log_probs", lps);
        char *s = cJSON_PrintUnformatted(o);
        ok = s && fprintf(out, "%s\n", s) >= 0;
        free(s);
        cJSON_Delete(o);
    }
    free(w);
    return ok ? 0 : -1;
}

tern_status_t cli_translate_quality(const tern_model_t *model, const tern_translator_options_t *options,
                                    const tern_request_t *base, FILE *in, FILE *out, int json) {
    tern_translator_t *tr = NULL;
    tern_status_t st = tern_translator_create(&tr, model, options);
    if (st) return st;
    char *lines[CHUNK] = {0};
    size_t caps[CHUNK] = {0};
    tern_result_t res[CHUNK];
    tern_token_scores_t ts[CHUNK];
    for (int eof = 0; !eof && !st;) {
        int n = 0;
        while (n < CHUNK) {
            ssize_t r = getline(&lines[n], &caps[n], in);
            if (r < 0) {
                if (ferror(in)) st = tern_error(TERN_ERR_IO, "cannot read the input");
                eof = 1;
                break;
            }
            while (r > 0 && (lines[n][r - 1] == '\n' || lines[n][r - 1] == '\r')) lines[n][--r] = 0;
            n++;
        }
        if (st || n == 0) break;
        tern_request_t req = *base;
        req.sources = (const char *const *)lines;
        req.num_sources = n;
        req.token_scores = ts;
        if ((st = tern_translate(tr, &req, res))) break;
        for (int i = 0; i < n; i++) {
            const char *text = res[i].num_hypotheses ? res[i].hypotheses[0] : "";
            if (!st && write_quality(out, json, text, &ts[i])) st = tern_error(TERN_ERR_IO, "cannot write the output");
            tern_result_free(&res[i]);
            tern_token_scores_free(&ts[i]);
        }
    }
    if (!st && fflush(out) != 0) st = tern_error(TERN_ERR_IO, "cannot write the output");
    for (int i = 0; i < CHUNK; i++) free(lines[i]);
    tern_translator_free(tr);
    return st;
}
