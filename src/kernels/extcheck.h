/*
 * extcheck.h — under AddressSanitizer, check the memory that an external library (oneDNN's JIT
 * kernels, OpenBLAS's assembly) is about to read or write.
 *
 * ASan instruments only code that it compiles: a GEMM handed a wrong row stride or size by our code
 * would read or write out of bounds inside oneDNN or OpenBLAS unseen, and corrupt the heap far from
 * the cause (glibc then aborts at some later malloc/free, at a point that depends on the thread
 * arenas' layout). Before every call into such a library, the SAN build checks that each operand's
 * extent — from its first element to its last, rows of `ld` elements — is addressable, and aborts
 * with the operand's name, shape and stride when it is not. Outside ASan builds the checks compile
 * to nothing.
 */
#ifndef TERN_KERNELS_EXTCHECK_H
#define TERN_KERNELS_EXTCHECK_H

#include <stddef.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TERN_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TERN_ASAN 1
#endif

#ifdef TERN_ASAN
#include <sanitizer/asan_interface.h>
#include <stdio.h>
#include <stdlib.h>

/* A rows x cols operand, rows ld elements apart, of elem bytes each (rows, cols >= 1). */
static inline void extcheck_2d(const char *what, const char *name, const void *p, size_t rows, size_t cols,
                               size_t ld, size_t elem) {
    if (!rows || !cols) return;
    size_t bytes = ((rows - 1) * ld + cols) * elem;
    void *bad = __asan_region_is_poisoned((void *)p, bytes);
    if (bad) {
        fprintf(stderr,
                "tern: %s: operand %s (%zu x %zu, stride %zu, %zu-byte elements) at %p is not addressable "
                "at byte %td of %zu\n",
                what, name, rows, cols, ld, elem, p, (char *)bad - (const char *)p, bytes);
        __asan_describe_address(bad);
        abort();
    }
}
#else
static inline void extcheck_2d(const char *what, const char *name, const void *p, size_t rows, size_t cols,
                               size_t ld, size_t elem) {
    (void)what, (void)name, (void)p, (void)rows, (void)cols, (void)ld, (void)elem;
}
#endif

#endif
