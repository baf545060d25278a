/*
 * vmap.h — target vocabulary reduction (CTranslate2 paper §3.7): a vocabulary map from source
 * n-grams to the target pieces they may produce, and the candidate set of a batch.
 *
 * File format (CTranslate2's, read by its use_vmap): one rule a line,
 *   <source n-gram, pieces separated by spaces> TAB <target pieces separated by spaces>
 * and one line whose n-gram is empty: the pieces that are always candidates. `tern vmap` builds
 * the file from a parallel corpus (word alignments by align.h, then for each source 1..3-gram the
 * top-N aligned target pieces, plus the K most frequent target pieces); the translator restricts
 * the output projection and the search to the union of the candidates of a batch's source
 * n-grams (plus unknown, start and end tokens) and maps the ids back.
 */
#ifndef TERN_VMAP_H
#define TERN_VMAP_H

#include <stdint.h>
#include <stdio.h>

#include "base/base.h"
#include "search/search.h"
#include "text/align.h"
#include "text/vocab.h"

typedef struct {
    int max_ngram;           /* longest source n-gram (3) */
    int top_n;               /* aligned target pieces kept per source n-gram (20) */
    int top_k;               /* most frequent target pieces, always candidates (200) */
    int min_count;           /* n-grams (n >= 2) seen in fewer sentence pairs are left out (2) */
    align_options_t align;   /* the aligner's options */
} vmap_build_options_t;

vmap_build_options_t vmap_build_default_options(void);

typedef struct {
    long pairs_used;         /* sentence pairs aligned (both sides non-empty) */
    long rules[4];           /* rules written per n-gram length (index n, 1..3) */
    long links;              /* alignment links (non-NULL) */
    int always;              /* pieces on the empty-key line */
} vmap_build_stats_t;

/* Aligns the corpus (ids in src_vocab / tgt_vocab, without special tokens) and writes the map
 * to out (CTranslate2's format, pieces by the vocabularies). Rules are written in order of n,
 * then of the n-gram's ids; targets by count, then id. */
tern_status_t vmap_build(FILE *out, const align_corpus_t *c, const vocab_t *src_vocab,
                         const vocab_t *tgt_vocab, const vmap_build_options_t *opt,
                         vmap_build_stats_t *stats);

typedef struct vmap vmap_t;

/* Loads a map, resolving pieces through the model's vocabularies: a rule whose n-gram holds a
 * piece unknown to the source vocabulary can never match and is dropped; target pieces unknown to
 * the target vocabulary are dropped (both counted in the warning). always (n_always): target ids
 * that are always candidates (unknown, start, end). Errors name the file and line. */
tern_status_t vmap_load(vmap_t **out, const char *path, const vocab_t *src_vocab, const vocab_t *tgt_vocab,
                        const int *always, int n_always);
void vmap_free(vmap_t *v);
/* A map of single source ids (a Marian lexical shortlist, shortlist.h): source id s (< n_src)
 * proposes ids[off[s] .. off[s + 1]); always (n_always) are always candidates; shared: every
 * source id of the batch is a candidate too (Marian with one vocabulary file for both sides);
 * pad_from >= 0: the candidates are padded to a multiple of 8 with the lowest ids >= pad_from not
 * yet in (what Marian does for its int8 GEMM); -1: no padding. The lists are copied. */
tern_status_t vmap_from_lists(vmap_t **out, int tgt_size, int n_src, const int64_t *off, const int *ids,
                              const int *always, int n_always, int shared, int pad_from);
int vmap_max_ngram(const vmap_t *v);
int vmap_num_rules(const vmap_t *v);

/* The candidates of a batch: the sorted union of the always-candidates and the targets of every
 * source n-gram (n <= max n) of the n sources, and of the ids marked in mark on entry (what the
 * search processors need: procs.h's search_procs_mark). out holds the target vocabulary's size;
 * mark is a scratch array of that many bytes, all 0 on return. Returns the count. */
int vmap_candidates(const vmap_t *v, const int *const *src, const int *len, int n, int *out, uint8_t *mark);

/* The search over a restricted vocabulary: a decoder whose ids are positions in cand (n), over
 * the model's decoder (inner) whose output the caller restricted to cand (the family's
 * set_vocab). step() maps the rows' tokens to model ids (tok: room for the most rows the search
 * will have, N x B). Map the results back with vmap_results_to_ids. */
typedef struct {
    decoder_iface_t inner;
    const int *cand;
    int n;
    int *tok;
    int R;
} vmap_decoder_t;

decoder_iface_t vmap_decoder(vmap_decoder_t *vd, const decoder_iface_t *inner, const int *cand, int n, int R,
                             int *tok);
/* The position of target id in cand (n, increasing), or -1. */
int vmap_position(const int *cand, int n, int id);
/* Restricted ids -> model ids in N results. */
void vmap_results_to_ids(search_result_t *res, int N, const int *cand);

#endif
