/*
 * client_1_0.c — a program written for libtern 1.0.0: built against the 1.0.0 header
 * (tests/abi/tern-1.0.0.h, the released include/tern.h of v1.0.0) and linked against a library
 * that has only 1.0.0's symbols (TERN_1), then run on the current libtern (tests/test_abi.py).
 * It checks what a 1.0.0 program relies on, and prints each check and then the translations:
 *   - the structs it gets by value (the defaults, tern_model_info()) are 1.0.0's layout, filled
 *     to exactly its size (a canary after the struct in the same object stays untouched) with
 *     struct_size = its sizeof;
 *   - a request and search parameters in that layout, and ones zeroed and filled by hand
 *     (struct_size 0: "the 1.0.0 layout"), translate: "i ||| hypothesis ||| score" per
 *     hypothesis, beam 4 with 2 hypotheses, for up to 64 lines of stdin.
 * Built against the current header instead (-DCURRENT_HEADER), the same program must print the
 * same translations.
 *
 *   client_1_0 MODEL_DIR < sentences.txt
 */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern.h"

#define CANARY 0xA5

static int untouched(const unsigned char *c, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (c[i] != CANARY) return 0;
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR < sentences.txt\n", argv[0]);
        return 2;
    }
    static struct {
        tern_search_params_t p;
        unsigned char canary[256];
    } sp;
    static struct {
        tern_request_t r;
        unsigned char canary[256];
    } rq;
    memset(&sp, CANARY, sizeof sp);
    memset(&rq, CANARY, sizeof rq);
    sp.p = tern_search_default_params();
    rq.r = tern_request_default();
    int ok = sp.p.struct_size == sizeof sp.p && rq.r.struct_size == sizeof rq.r &&
             untouched(sp.canary, sizeof sp.canary) && untouched(rq.canary, sizeof rq.canary);
    printf("search params: struct_size %zu, sizeof %zu; request: struct_size %zu, sizeof %zu; canaries %s\n",
           sp.p.struct_size, sizeof sp.p, rq.r.struct_size, sizeof rq.r,
           untouched(sp.canary, sizeof sp.canary) && untouched(rq.canary, sizeof rq.canary) ? "intact" : "OVERWRITTEN");
    if (!ok) return 3;

    tern_model_options_t mo = tern_model_default_options();
    tern_model_t *model = NULL;
    tern_status_t st = tern_model_load(&model, argv[1], &mo);
    if (st != TERN_OK) {
        fprintf(stderr, "cannot load %s: %s\n", argv[1], tern_last_error());
        return 1;
    }
    static struct {
        tern_model_info_t i;
        unsigned char canary[256];
    } mi;
    memset(&mi, CANARY, sizeof mi);
    mi.i = tern_model_info(model);
    printf("model info: struct_size %zu, sizeof %zu; family %s; canary %s\n", mi.i.struct_size, sizeof mi.i,
           mi.i.family, untouched(mi.canary, sizeof mi.canary) ? "intact" : "OVERWRITTEN");
    if (mi.i.struct_size != sizeof mi.i || !untouched(mi.canary, sizeof mi.canary)) return 3;
    tern_translator_options_t to = tern_translator_default_options();
    to.threads_per_worker = 1;
    tern_translator_t *tr = NULL;
    if ((st = tern_translator_create(&tr, model, &to)) != TERN_OK) {
        fprintf(stderr, "cannot create a translator: %s\n", tern_last_error());
        return 1;
    }
    char *lines[64];
    int n = 0;
    char buf[8192];
    while (n < 64 && fgets(buf, sizeof buf, stdin)) {
        buf[strcspn(buf, "\r\n")] = 0;
        lines[n++] = strdup(buf);
    }
    /* twice: the defaults' structs, then structs zeroed and filled by hand (struct_size 0) */
    for (int pass = 0; pass < 2; pass++) {
        tern_search_params_t p = sp.p;
        tern_request_t r = rq.r;
        if (pass == 1) {
            memset(&p, 0, sizeof p);
            memset(&r, 0, sizeof r);
            p.max_decoding_length = 256;
            p.min_length = 1;
            p.early_stop = 1;
            p.return_scores = 1;
        }
        p.beam_size = 4;
        p.num_hypotheses = 2;
        r.params = &p;
        r.sources = (const char *const *)lines;
        r.num_sources = n;
        tern_result_t results[64];
        if ((st = tern_translate(tr, &r, results)) != TERN_OK) {
            fprintf(stderr, "pass %d: translation failed: %s\n", pass, tern_last_error());
            return 1;
        }
        printf("pass %d\n", pass);
        for (int i = 0; i < n; i++) {
            for (int k = 0; k < results[i].num_hypotheses; k++)
                printf("%d ||| %s ||| %.6f\n", i, results[i].hypotheses[k], results[i].scores ? results[i].scores[k] : 0.0f);
            tern_result_free(&results[i]);
        }
    }
    for (int i = 0; i < n; i++) free(lines[i]);
    tern_translator_free(tr);
    tern_model_free(model);
    return 0;
}
