/* process_env.c — see process_env.h. */
#include <stdlib.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "process_env.h"

/* Process defaults (process_env.h). OpenMP waiting: a libgomp thread that waits for work spins
 * GOMP_SPINCOUNT times before it sleeps: 300,000 by default, that is 300,000 `pause` instructions,
 * 10-15 ms on Skylake and later cores. A decoder step opens ~50 short parallel regions (one per GEMM); where the cores
 * also run other work (shared servers, CI) the spinning thread takes the CPU its partner needs.
 * Measured with 2 threads on a 2-core machine busy with other jobs: 23-60 target tokens/s with the
 * default against 316 with 3,000 spins; on the same cores idle, 1,000 with either. */
void cli_process_defaults(char **argv) {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
#endif
    if (getenv("GOMP_SPINCOUNT") || getenv("OMP_WAIT_POLICY")) return;
    /* the program's own path (exec'ing "/proc/self/exe" would rename the process "exe") */
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || (size_t)n >= sizeof self - 1) return;
    self[n] = 0;
    if (setenv("GOMP_SPINCOUNT", "3000", 1) != 0) return;
    execv(self, argv); /* returns only on failure: go on with libgomp's default */
    unsetenv("GOMP_SPINCOUNT");
}
