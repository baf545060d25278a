/* hash64.h — an open-addressing hash map from 64-bit keys to dense indices 0, 1, 2, ... in
 * order of insertion (the caller keeps its values in arrays indexed by them). Grows at half load.
 * Keys are any 64-bit value but UINT64_MAX. */
#ifndef TERN_HASH64_H
#define TERN_HASH64_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

typedef struct {
    uint64_t *keys;  /* (cap) UINT64_MAX marks an empty slot */
    int32_t *index;  /* (cap) */
    size_t cap, count;
} hash64_t;

/* The index of key, or -1 when absent. */
int32_t hash64_find(const hash64_t *h, uint64_t key);
/* The index of key, inserted (as the next index) when absent; -1 on allocation failure (with
 * the error set) or past 2^31 - 1 keys. *added (may be NULL) tells whether it was inserted. */
int32_t hash64_insert(hash64_t *h, uint64_t key, int *added);
void hash64_free(hash64_t *h);

#endif
