/* file.c — whole-file mapping and reading, paths, aligned allocation, time. */
#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

tern_status_t file_map(mapped_file_t *f, const char *path) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return tern_error(TERN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return tern_error(TERN_ERR_IO, "%s: not a regular file", path);
    }
    f->size = (size_t)st.st_size;
    if (f->size == 0) {
        close(fd);
        f->data = (const uint8_t *)"";
        return TERN_OK;
    }
    void *p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
        close(fd);
        f->data = p;
        f->is_mmap = 1;
        return TERN_OK;
    }
    /* Fall back to reading (e.g. a pipe-backed or special file system). */
    uint8_t *buf = malloc(f->size);
    if (!buf) {
        close(fd);
        return tern_error(TERN_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, f->size);
    }
    size_t got = 0;
    while (got < f->size) {
        ssize_t r = read(fd, buf + got, f->size - got);
        if (r <= 0) {
            free(buf);
            close(fd);
            return tern_error(TERN_ERR_IO, "%s: read failed", path);
        }
        got += (size_t)r;
    }
    close(fd);
    f->data = buf;
    return TERN_OK;
}

void file_unmap(mapped_file_t *f) {
    if (!f || !f->data || f->size == 0) return;
    if (f->is_mmap) munmap((void *)f->data, f->size);
    else free((void *)f->data);
    memset(f, 0, sizeof *f);
}

tern_status_t file_read_all(const char *path, char **data, size_t *size) {
    *data = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) return tern_error(TERN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(fp);
        return tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(fp);
                return tern_error(TERN_ERR_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, fp);
        n += r;
        if (r == 0) break;
    }
    int err = ferror(fp);
    fclose(fp);
    if (err) {
        free(buf);
        return tern_error(TERN_ERR_IO, "%s: read failed", path);
    }
    buf[n] = 0;
    *data = buf;
    if (size) *size = n;
    return TERN_OK;
}

int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

char *path_join(char *buf, size_t n, const char *dir, const char *name) {
    size_t dl = strlen(dir);
    if (dl > 0 && dir[dl - 1] == '/') snprintf(buf, n, "%s%s", dir, name);
    else snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

void *aligned_alloc64(size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 64;
    if (posix_memalign(&p, 64, (bytes + 63) & ~(size_t)63) != 0) return NULL;
    return p;
}

void aligned_free(void *p) { free(p); }

#if defined(__SANITIZE_ADDRESS__)
void *big_alloc(size_t bytes) { return aligned_alloc64(bytes); }
void big_free(void *p, size_t bytes) {
    (void)bytes;
    aligned_free(p);
}
#else
void *big_alloc(size_t bytes) {
    if (bytes == 0) bytes = 64;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    if (bytes >= ((size_t)2 << 20)) madvise(p, bytes, MADV_HUGEPAGE); /* a hint: no huge pages is fine */
#endif
    return p;
}
void big_free(void *p, size_t bytes) {
    if (p) munmap(p, bytes ? bytes : 64);
}
#endif

double time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
