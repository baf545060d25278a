/*
 * dalloc.h — a caching allocator for device memory (what cudaMalloc/cudaFree cost is paid once per
 * block size, not per batch), with its backend behind two function pointers so that the caching
 * logic runs and is tested on the host (tests/c/test_cuda_host.c, malloc as the backend).
 *
 * Sizes are rounded up to a class: multiples of 512 bytes up to 1 MiB, multiples of 2 MiB above
 * (as PyTorch's allocator rounds). A freed block goes to its class's free list; a request takes a
 * cached block of its exact class when there is one, else asks the backend; when the backend
 * fails, the cache is emptied back to it and the request retried once (then NULL: the caller
 * reports out of memory, naming what it allocated). One allocator serves one stream (a translator
 * owns one): blocks are reused in stream order without events. Not thread-safe: one per thread,
 * as translators are.
 */
#ifndef TERN_CUDA_DALLOC_H
#define TERN_CUDA_DALLOC_H

#include <stddef.h>

typedef struct {
    void *(*alloc)(size_t bytes, void *ctx); /* NULL on failure */
    void (*release)(void *ptr, void *ctx);
    void *ctx;
} dalloc_backend_t;

typedef struct dalloc dalloc_t;

typedef struct {
    size_t in_use;        /* bytes of the blocks handed out (rounded sizes) */
    size_t cached;        /* bytes of the free blocks kept */
    size_t peak;          /* most bytes in_use + cached at once */
    long backend_allocs;  /* calls to the backend's alloc that succeeded */
    long backend_frees;   /* blocks given back to the backend */
    long hits;            /* requests served from the cache */
} dalloc_stats_t;

dalloc_t *dalloc_new(dalloc_backend_t backend);
/* Gives every cached block back and frees the allocator; blocks still in use are given back too
 * (their owner must be done with them). */
void dalloc_free(dalloc_t *a);
/* size rounded up to its class (0 stays 0). */
size_t dalloc_round(size_t size);
/* A block of at least size bytes (NULL for size 0 or when the backend cannot give one). */
void *dalloc_get(dalloc_t *a, size_t size);
/* Returns a block from dalloc_get to the cache (NULL: nothing). A pointer this allocator did not
 * hand out is ignored with -1 (0 otherwise). */
int dalloc_put(dalloc_t *a, void *ptr);
/* Gives every cached (free) block back to the backend. */
void dalloc_trim(dalloc_t *a);
dalloc_stats_t dalloc_stats(const dalloc_t *a);

#endif
