/*
 * test_marian_npz.c — Marian's model.npz reader on corrupt archives (fuzz/fuzz_marian_npz.c found
 * these): a zip entry whose header claims gigabytes is refused as truncated without the loader
 * asking for that memory (it once malloc'd the claimed size up front: an 11 KB file made it ask
 * for 2.9 GB). Run in a child process under an address-space limit of its size + 1 GiB (not under
 * AddressSanitizer, which reserves terabytes of address space).
 */
#include <minizip/zip.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "model/marian_format.h"
#include "tern.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

static char dir[64];

static void write_file(const char *name, const void *data, size_t n) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        perror(p);
        exit(1);
    }
    fclose(f);
}

/* model.npz with one stored array "Wemb" (7 x 4 float32) whose sizes in the local header and the
 * central directory then claim `claim` bytes (0: left as written). */
static void write_npz(uint32_t claim, int big) {
    char p[256];
    snprintf(p, sizeof p, "%s/model.npz", dir);
    uint8_t npy[256];
    const char *h = "{'descr': '<f4', 'fortran_order': False, 'shape': (7, 4), }     \n";
    size_t hl = strlen(h), n = 10 + hl + 7 * 4 * 4;
    memcpy(npy, "\x93NUMPY\x01\x00", 8);
    npy[8] = (uint8_t)hl, npy[9] = 0;
    memcpy(npy + 10, h, hl);
    memset(npy + 10 + hl, 0, n - 10 - hl);
    zipFile zf = zipOpen64(p, APPEND_STATUS_CREATE);
    zip_fileinfo zi;
    memset(&zi, 0, sizeof zi);
    CHECK(zf && zipOpenNewFileInZip64(zf, "Wemb.npy", &zi, NULL, 0, NULL, 0, NULL, 0, 0, 0) == ZIP_OK &&
          zipWriteInFileInZip(zf, npy, (unsigned)n) == ZIP_OK && zipCloseFileInZip(zf) == ZIP_OK);
    if (big) { /* an array of 3 MiB (read through the growing buffer), deflated */
        const char *bh = "{'descr': '<f4', 'fortran_order': False, 'shape': (786432,), }        \n";
        size_t bl = strlen(bh), bn = 10 + bl + (size_t)786432 * 4;
        uint8_t *b = calloc(1, bn);
        memcpy(b, "\x93NUMPY\x01\x00", 8);
        b[8] = (uint8_t)bl;
        memcpy(b + 10, bh, bl);
        for (size_t i = 10 + bl; i < bn; i += 4) b[i + 3] = (uint8_t)(i % 61); /* not all zero */
        CHECK(zipOpenNewFileInZip64(zf, "big.npy", &zi, NULL, 0, NULL, 0, NULL, Z_DEFLATED, 6, 0) == ZIP_OK &&
              zipWriteInFileInZip(zf, b, (unsigned)bn) == ZIP_OK && zipCloseFileInZip(zf) == ZIP_OK);
        free(b);
    }
    CHECK(zipClose(zf, NULL) == ZIP_OK);
    if (!claim) return;
    FILE *f = fopen(p, "r+b");
    uint8_t buf[4096];
    size_t got = fread(buf, 1, sizeof buf, f);
    int patched = 0;
    for (size_t i = 0; i + 46 <= got; i++) {
        size_t at = 0;
        if (!memcmp(buf + i, "PK\x03\x04", 4)) at = i + 22; /* local header: uncompressed size */
        else if (!memcmp(buf + i, "PK\x01\x02", 4)) at = i + 24; /* central directory */
        else continue;
        for (int k = 0; k < 4; k++) buf[at + k] = (uint8_t)(claim >> (8 * k));
        patched++;
    }
    CHECK_EQ_INT(patched, 2);
    rewind(f);
    CHECK(fwrite(buf, 1, got, f) == got);
    fclose(f);
}

/* Loads dir in a child process (under an address-space limit); the child's exit: 0 when the load
 * failed with `want` and a message containing `msg`. */
static int load_in_child(tern_status_t want, const char *msg) {
    pid_t pid = fork();
    if (pid == 0) {
#ifndef UNDER_ASAN
        FILE *f = fopen("/proc/self/statm", "r");
        unsigned long pages = 0;
        if (f && fscanf(f, "%lu", &pages) == 1) {
            struct rlimit rl;
            rl.rlim_cur = rl.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)1 << 30);
            setrlimit(RLIMIT_AS, &rl);
        }
        if (f) fclose(f);
#endif
        hf_checkpoint_t ck;
        tern_status_t st = marian_checkpoint_load(&ck, dir);
        const char *e = tern_last_error();
        if (st != want || !strstr(e, msg)) {
            fprintf(stderr, "status %d (want %d): %s\n", (int)st, (int)want, e);
            _exit(1);
        }
        _exit(0);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128;
}

int main(void) {
    tern_set_log_level(TERN_LOG_QUIET);
    snprintf(dir, sizeof dir, "/tmp/tern-test-marian-npz-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    const char *dec = "models:\n  - model.npz\nvocabs:\n  - vocab.yml\n  - vocab.yml\n";
    const char *voc = "</s>: 0\n<unk>: 1\na: 2\nb: 3\nc: 4\nd: 5\ne: 6\n";
    write_file("decoder.yml", dec, strlen(dec));
    write_file("vocab.yml", voc, strlen(voc));

    /* an entry claiming 3.75 GB (an 11 KB model.npz once made the loader ask for 2.9 GB) */
    write_npz(0xF0000000u, 0);
    CHECK_EQ_INT(load_in_child(TERN_ERR_FORMAT, "cannot read it"), 0);
    /* claiming less than it holds: read as truncated too */
    write_npz(20, 0);
    CHECK_EQ_INT(load_in_child(TERN_ERR_FORMAT, "Wemb"), 0);
    /* the archive as written (its sizes right): the reader goes on to the options */
    write_npz(0, 0);
    CHECK_EQ_INT(load_in_child(TERN_ERR_FORMAT, "special:model.yml"), 0);
    /* with an array of 3 MiB (its buffer grown from 1 MiB): read whole, the options still missing */
    write_npz(0, 1);
    CHECK_EQ_INT(load_in_child(TERN_ERR_FORMAT, "special:model.yml"), 0);

    char p[256];
    const char *names[] = {"model.npz", "decoder.yml", "vocab.yml"};
    for (int i = 0; i < 3; i++) snprintf(p, sizeof p, "%s/%s", dir, names[i]), unlink(p);
    rmdir(dir);
    return check_report("test_marian_npz");
}
