/* The CPU check of the tern executable, before any code compiled for x86-64-v3 runs.
 *
 * Tern is compiled with -march=x86-64-v3 (the Makefile's ARCH): the compiler may use AVX, AVX2,
 * FMA, BMI1/2, F16C, LZCNT and MOVBE instructions anywhere, so on an older CPU `tern` would die
 * with SIGILL ("illegal instruction") somewhere in its first steps. This file alone is compiled
 * for baseline x86-64 (a Makefile rule gives its object ARCH=-march=x86-64), and its function is
 * a constructor of priority 101, the first of the executable's own (libtern.a's C++ static
 * initializers and main come later), so it can say what is missing and exit 1 instead. The
 * shared libraries' constructors (oneDNN, libstdc++, libgomp) run before it; they choose their
 * instruction sets at run time. It is linked into the tern executable only: the library never
 * exits (the Python package checks the CPU before it loads libtern: python/tern/_cpu.py).
 *
 * Test hook: TERN_FAKE_NO_CPU_FEATURES=avx2,fma (names of the list below, separated by commas or
 * spaces) makes the check treat those features as missing, to test the message on any CPU.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* x86-64-v3 beyond the baseline: the features __builtin_cpu_supports knows by these names */
#define CPU_FEATURES(X) X("avx") X("avx2") X("fma") X("bmi") X("bmi2") X("f16c") X("lzcnt") X("movbe")

/* 1 when `name` is one of the words of `list` (separated by commas, spaces or tabs) */
static int listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        while (*p == ',' || *p == ' ' || *p == '\t') p++;
        size_t len = strcspn(p, ", \t");
        if (len == n && memcmp(p, name, n) == 0) return 1;
        p += len;
    }
    return 0;
}

static void put(const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(2, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

__attribute__((constructor(101))) static void tern_cpu_guard(void) {
    __builtin_cpu_init(); /* libgcc's own CPU detection may not have run yet (same priority) */
    const char *fake = getenv("TERN_FAKE_NO_CPU_FEATURES");
    char missing[128] = "";
    size_t len = 0;
#define CHECK(name)                                                                      \
    if (!__builtin_cpu_supports(name) || (fake && listed(fake, name))) {                 \
        size_t k = strlen(name);                                                         \
        if (len) missing[len++] = ' ';                                                   \
        memcpy(missing + len, name, k + 1);                                              \
        len += k;                                                                        \
    }
    CPU_FEATURES(CHECK)
#undef CHECK
    if (!len) return;
    put("tern: this build needs an x86-64 CPU with AVX2 and FMA (x86-64-v3: Intel Haswell, AMD Zen or "
        "newer); this CPU lacks: ");
    put(missing);
    put("\n");
    _exit(1); /* not exit(): no destructor or atexit handler compiled for x86-64-v3 may run */
}
