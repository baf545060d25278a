/* hash64.c — open-addressing hash map of 64-bit keys (hash64.h). */
#include <stdlib.h>
#include <string.h>

#include "base/hash64.h"

static size_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return (size_t)k;
}

int32_t hash64_find(const hash64_t *h, uint64_t key) {
    if (!h->cap) return -1;
    size_t i = mix(key) & (h->cap - 1);
    while (h->keys[i] != UINT64_MAX) {
        if (h->keys[i] == key) return h->index[i];
        i = (i + 1) & (h->cap - 1);
    }
    return -1;
}

static int grow(hash64_t *h) {
    size_t ncap = h->cap ? h->cap * 2 : 1024;
    uint64_t *nk = malloc(ncap * sizeof *nk);
    int32_t *ni = malloc(ncap * sizeof *ni);
    if (!nk || !ni) {
        free(nk);
        free(ni);
        tern_error(TERN_ERR_NOMEM, "out of memory for a hash table of %zu slots", ncap);
        return 0;
    }
    memset(nk, 0xff, ncap * sizeof *nk);
    for (size_t i = 0; i < h->cap; i++) {
        if (h->keys[i] == UINT64_MAX) continue;
        size_t j = mix(h->keys[i]) & (ncap - 1);
        while (nk[j] != UINT64_MAX) j = (j + 1) & (ncap - 1);
        nk[j] = h->keys[i];
        ni[j] = h->index[i];
    }
    free(h->keys);
    free(h->index);
    h->keys = nk;
    h->index = ni;
    h->cap = ncap;
    return 1;
}

int32_t hash64_insert(hash64_t *h, uint64_t key, int *added) {
    if (added) *added = 0;
    if ((h->count + 1) * 2 > h->cap && !grow(h)) return -1;
    size_t i = mix(key) & (h->cap - 1);
    while (h->keys[i] != UINT64_MAX) {
        if (h->keys[i] == key) return h->index[i];
        i = (i + 1) & (h->cap - 1);
    }
    if (h->count >= (size_t)INT32_MAX) {
        tern_error(TERN_ERR_UNSUPPORTED, "hash table: more than 2^31 - 1 keys");
        return -1;
    }
    h->keys[i] = key;
    h->index[i] = (int32_t)h->count;
    if (added) *added = 1;
    return (int32_t)h->count++;
}

void hash64_free(hash64_t *h) {
    free(h->keys);
    free(h->index);
    memset(h, 0, sizeof *h);
}
