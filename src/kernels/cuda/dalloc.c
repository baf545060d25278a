/*
 * dalloc.c — the caching allocator of dalloc.h. Blocks are tracked in one array (a translator
 * holds tens of them: a linear scan is cheaper than any structure here); each records its rounded
 * size and whether it is handed out.
 */
#include "kernels/cuda/dalloc.h"

#include <stdlib.h>

typedef struct {
    void *ptr;
    size_t size; /* rounded */
    int used;
} block_t;

struct dalloc {
    dalloc_backend_t be;
    block_t *b;
    int n, cap;
    dalloc_stats_t st;
};

#define SMALL_LIMIT ((size_t)1 << 20)
#define SMALL_UNIT ((size_t)512)
#define LARGE_UNIT ((size_t)2 << 20)

size_t dalloc_round(size_t size) {
    size_t u = size <= SMALL_LIMIT ? SMALL_UNIT : LARGE_UNIT;
    if (size > (size_t)-1 - u) return 0; /* cannot be rounded: no block that large */
    return (size + u - 1) / u * u;
}

dalloc_t *dalloc_new(dalloc_backend_t backend) {
    if (!backend.alloc || !backend.release) return NULL;
    dalloc_t *a = calloc(1, sizeof *a);
    if (a) a->be = backend;
    return a;
}

static void give_back(dalloc_t *a, int i) {
    a->be.release(a->b[i].ptr, a->be.ctx);
    a->st.backend_frees++;
    if (a->b[i].used) a->st.in_use -= a->b[i].size;
    else a->st.cached -= a->b[i].size;
    a->b[i] = a->b[--a->n];
}

void dalloc_trim(dalloc_t *a) {
    if (!a) return;
    for (int i = a->n - 1; i >= 0; i--)
        if (!a->b[i].used) give_back(a, i);
}

void dalloc_free(dalloc_t *a) {
    if (!a) return;
    while (a->n > 0) give_back(a, a->n - 1);
    free(a->b);
    free(a);
}

static void *from_backend(dalloc_t *a, size_t size) {
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 16;
        block_t *b = realloc(a->b, (size_t)cap * sizeof *b);
        if (!b) return NULL;
        a->b = b;
        a->cap = cap;
    }
    void *p = a->be.alloc(size, a->be.ctx);
    if (!p) return NULL;
    a->st.backend_allocs++;
    a->b[a->n++] = (block_t){p, size, 1};
    return p;
}

void *dalloc_get(dalloc_t *a, size_t size) {
    if (!a || size == 0) return NULL;
    size_t r = dalloc_round(size);
    if (r == 0) return NULL;
    for (int i = 0; i < a->n; i++)
        if (!a->b[i].used && a->b[i].size == r) {
            a->b[i].used = 1;
            a->st.cached -= r;
            a->st.in_use += r;
            a->st.hits++;
            return a->b[i].ptr;
        }
    void *p = from_backend(a, r);
    if (!p) { /* the cache back to the backend, then once more */
        dalloc_trim(a);
        p = from_backend(a, r);
        if (!p) return NULL;
    }
    a->st.in_use += r;
    if (a->st.in_use + a->st.cached > a->st.peak) a->st.peak = a->st.in_use + a->st.cached;
    return p;
}

int dalloc_put(dalloc_t *a, void *ptr) {
    if (!a || !ptr) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->b[i].ptr == ptr && a->b[i].used) {
            a->b[i].used = 0;
            a->st.in_use -= a->b[i].size;
            a->st.cached += a->b[i].size;
            return 0;
        }
    return -1;
}

dalloc_stats_t dalloc_stats(const dalloc_t *a) {
    dalloc_stats_t z = {0};
    return a ? a->st : z;
}
