/*
 * shortlist.h — Marian's lexical shortlists, read onto a vocabulary map (vmap.h).
 *
 * A shortlist restricts the output layer as a vocabulary map does, with Marian's semantics
 * (src/data/shortlist.{h,cpp} of Marian): the candidates of a batch are the target ids
 * 0 .. first-1 (the most frequent words, Marian's vocabularies being sorted by frequency), the
 * `best` most probable translations of every source id of the batch (its end token included)
 * whose probability is above `threshold`, every source id itself when both sides use one
 * vocabulary file, and, until their count is a multiple of 8, the lowest ids >= first not yet in.
 *
 * Two files Marian reads:
 * - text ("lex.s2t"): one "target source probability" a line (whitespace-separated); words
 *   "NULL" skipped; a word outside the vocabulary read as <unk> (as Marian; a warning counts
 *   them); the pruning (best, threshold) is done here, as Marian's
 *   LexicalShortlistGenerator: per source word, by probability then by higher target id, kept
 *   while fewer than `best` and probability > threshold; a pair given twice: the later line.
 * - binary (`marian-conv --shortlist FILE first best threshold --dump-shortlist OUT`), already
 *   pruned, little-endian: uint64 magic 0xF11A48D5013417F5, uint64 checksum, uint64 first,
 *   uint64 best, uint64 n_off, uint64 n_ids, then uint64 off[n_off] and uint32 ids[n_ids]:
 *   source id s proposes ids[off[s] .. off[s+1]). The checksum is Marian's util::hashMem over the
 *   file's uint64 words from `first` on (boost's hash_combine of each word into a seed 0).
 */
#ifndef TERN_SHORTLIST_H
#define TERN_SHORTLIST_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "search/vmap.h"
#include "text/vocab.h"

#define SHORTLIST_BINARY_MAGIC 0xF11A48D5013417F5ull

/* What to load: Marian's --shortlist values ("FILE first best threshold"; a binary file's second
 * value is Marian's check flag: 0 skips the checksum). */
typedef struct {
    char path[1024];
    int n_vals;        /* how many values followed the file (0..3) */
    long first, best;  /* text: 100 and 100 when not given (Marian's defaults) */
    float threshold;   /* text: 0 when not given */
    int check;         /* binary: verify the checksum (1 when not given) */
} shortlist_spec_t;

/* Parses "FILE[,first[,best[,threshold]]]" (commas or spaces between the values). what names the
 * option in errors. */
tern_status_t shortlist_spec_parse(shortlist_spec_t *s, const char *text, const char *what);

/* Marian's checksum of a binary shortlist: hashMem over n 64-bit words. */
uint64_t shortlist_checksum(const uint64_t *words, size_t n);

typedef struct {
    int binary;            /* 1: the binary format */
    long first, best;      /* in effect (a binary file's from its header) */
    long sources;          /* source ids with a non-empty list */
    long entries;          /* target ids in all lists */
} shortlist_info_t;

/* Loads a shortlist onto a vocabulary map over the model's vocabularies (the text format by
 * pieces, the binary by ids). eos: the target end token (always a candidate, as the decoder needs
 * it); shared: both sides use one vocabulary file. Errors name the file and the line (text) or
 * the field/entry (binary): a line without three fields or with a bad probability, a truncated or
 * corrupt binary file, an id outside the vocabulary. */
tern_status_t shortlist_load(vmap_t **out, const shortlist_spec_t *spec, const vocab_t *src_vocab,
                             const vocab_t *tgt_vocab, int shared, int eos, shortlist_info_t *info);

#endif
