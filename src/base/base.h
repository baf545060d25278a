/* base.h — internal basics shared by every module: errors, logging, files, timing. */
#ifndef TERN_BASE_H
#define TERN_BASE_H

#include "tern.h"
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define TERN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TERN_PRINTF(a, b)
#endif

/* Sets this thread's last error message (printf-style) and returns status, so that library code
 * can write `return tern_error(TERN_ERR_FORMAT, "%s: tensor %s: ...", path, name);`. */
tern_status_t tern_error(tern_status_t status, const char *fmt, ...) TERN_PRINTF(2, 3);
/* Prefixes the current last error with more context ("loading model X: <old message>"). */
tern_status_t tern_error_prefix(tern_status_t status, const char *fmt, ...) TERN_PRINTF(2, 3);

/* The ABI rule of the structs tern.h passes by value ("Version and ABI"): *dst (a struct of
 * `known` bytes, this library's) becomes *defaults overwritten by the first struct_size bytes of
 * the caller's *src (NULL: the defaults alone), with dst's struct_size set to known. struct_size 0
 * reads as base bytes (the struct's first layout in this MAJOR version: its size in 1.0.0, which
 * API_STRUCT_IN passes for a struct that has not grown); one below sizeof(size_t) or above known is
 * TERN_ERR_INVALID_ARG naming type. */
tern_status_t api_struct_in(void *dst, const void *src, const void *defaults, size_t known, size_t base,
                            const char *type);
/* A public struct's size in an earlier version whose last field was `last`: that field's end,
 * rounded up to the struct's alignment. */
#define ABI_SIZE_UPTO(type, last)                                                                \
    ((offsetof(type, last) + sizeof(((type *)0)->last) + _Alignof(type) - 1) / _Alignof(type) * \
     _Alignof(type))
#define API_STRUCT_IN(dst, src, defaults, type) \
    api_struct_in((dst), (src), (defaults), sizeof *(dst), sizeof *(dst), #type)

/* Logging to stderr, filtered by tern_set_log_level(). */
void tern_log(tern_log_level_t level, const char *fmt, ...) TERN_PRINTF(2, 3);
#define TERN_WARN(...) tern_log(TERN_LOG_WARN, __VA_ARGS__)
#define TERN_INFO(...) tern_log(TERN_LOG_INFO, __VA_ARGS__)

/* A read-only view of a whole file: memory-mapped when possible, read into memory otherwise. */
typedef struct {
    const uint8_t *data;
    size_t size;
    int is_mmap;
} mapped_file_t;
tern_status_t file_map(mapped_file_t *f, const char *path);
void file_unmap(mapped_file_t *f);
/* Reads a whole file into a NUL-terminated malloc'd buffer. */
tern_status_t file_read_all(const char *path, char **data, size_t *size);
int file_exists(const char *path);
/* path_join(buf, n, dir, name): "dir/name" into buf; returns buf. */
char *path_join(char *buf, size_t n, const char *dir, const char *name);

/* Allocation helpers: aligned to 64 bytes, NULL on failure (never abort). */
void *aligned_alloc64(size_t bytes);
void aligned_free(void *p);
/* A large buffer that is filled and read again and again (a step's logits): its own mapping, with
 * transparent huge pages asked for (2 MB pages: far fewer page faults when it is first written,
 * and fewer TLB misses), freed with big_free(p, the same bytes). Page-aligned; its contents start
 * as zeros. Under AddressSanitizer, aligned_alloc64 (so accesses stay checked). */
void *big_alloc(size_t bytes);
void big_free(void *p, size_t bytes);

/* Monotonic seconds. */
double time_now(void);

#define TERN_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TERN_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
