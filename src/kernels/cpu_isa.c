/* cpu_isa.c — run-time instruction-set detection with the TERN_MAX_CPU_ISA cap (cpu_isa.h). */
#include <cpuid.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include <oneapi/dnnl/dnnl.h>
#include <string.h>

#include "kernels/cpu_isa.h"
#include "kernels/kernels.h"
#include "tern.h"

static const char *const names[] = {"AVX2", "AVX512_CORE", "AVX512_CORE_VNNI", "AVX512_CORE_BF16",
                                    "AVX512_CORE_AMX"};

const char *cpu_isa_name(cpu_isa_t isa) {
    return (unsigned)isa < sizeof names / sizeof *names ? names[isa] : "?";
}

int cpu_isa_parse(const char *name) {
    if (!strcasecmp(name, "ALL")) return CPU_ISA_AVX512_CORE_AMX;
    for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
        if (!strcasecmp(name, names[i])) return i;
    return -1;
}

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static cpu_isa_t detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(1, 0, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return CPU_ISA_AVX2;
    uint64_t xcr0 = xgetbv0();
    /* opmask, ZMM0-15 upper halves and ZMM16-31 enabled by the OS (bits 5, 6, 7), with SSE/AVX state */
    int os_avx512 = (xcr0 & 0xe6) == 0xe6;
    int os_amx = (xcr0 & (3u << 17)) == (3u << 17); /* XTILECFG, XTILEDATA */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return CPU_ISA_AVX2;
    unsigned b7 = b, c7 = c, d7 = d;
    int f = (b7 >> 16) & 1, dq = (b7 >> 17) & 1, bw = (b7 >> 30) & 1, vl = (b7 >> 31) & 1;
    if (!os_avx512 || !(f && dq && bw && vl)) return CPU_ISA_AVX2;
    if (!((c7 >> 11) & 1)) return CPU_ISA_AVX512_CORE; /* AVX512_VNNI */
    unsigned a1 = 0, b1, c1, d1;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) == 0) a1 = 0;
    if (!((a1 >> 5) & 1)) return CPU_ISA_AVX512_CORE_VNNI; /* AVX512_BF16 */
    int amx = ((d7 >> 24) & 1) && ((d7 >> 25) & 1) && ((d7 >> 22) & 1); /* TILE, INT8, BF16 */
    return amx && os_amx ? CPU_ISA_AVX512_CORE_AMX : CPU_ISA_AVX512_CORE_BF16;
}

/* AMD family 19h (Zen 3, Zen 4) with AVX-512, i.e. Zen 4: its 512-bit operations run as two halves
 * on 256-bit units, so AVX2 FMA code has the same peak as AVX-512. */
static int detect_avx512_halves(cpu_isa_t isa) {
    unsigned a, b, c, d;
    if (isa < CPU_ISA_AVX512_CORE || !__get_cpuid(0, &a, &b, &c, &d)) return 0;
    /* "AuthenticAMD" in ebx, edx, ecx */
    if (b != 0x68747541u || d != 0x69746e65u || c != 0x444d4163u) return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    unsigned family = (a >> 8) & 0xf;
    if (family == 0xf) family += (a >> 20) & 0xff;
    return family == 0x19;
}

static cpu_isa_t g_detected, g_effective;
static int g_avx512_halves;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void) {
    g_detected = detect();
    g_effective = g_detected;
    g_avx512_halves = detect_avx512_halves(g_detected);
    const char *cap = getenv("TERN_MAX_CPU_ISA");
    if (cap && *cap) {
        int c = cpu_isa_parse(cap);
        if (c < 0) {
            fprintf(stderr, "tern: TERN_MAX_CPU_ISA=%s is not one of AVX2, AVX512_CORE, AVX512_CORE_VNNI, "
                            "AVX512_CORE_BF16, AVX512_CORE_AMX, ALL: using AVX2\n", cap);
            c = CPU_ISA_AVX2;
        }
        if ((cpu_isa_t)c < g_effective) g_effective = (cpu_isa_t)c;
    }
}

cpu_isa_t cpu_isa_detected(void) {
    pthread_once(&once, init);
    return g_detected;
}

cpu_isa_t cpu_isa_effective(void) {
    pthread_once(&once, init);
    return g_effective;
}

int cpu_avx512_halves(void) {
    pthread_once(&once, init);
    return g_avx512_halves;
}

static const char *onednn_isa_name(unsigned isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "unknown";
    }
}

static char caps_text[96];

static void caps_init(void) {
    size_t n = 0;
    for (int i = 0; i <= (int)cpu_isa_detected(); i++)
        n += (size_t)snprintf(caps_text + n, sizeof caps_text - n, "%s%s", i ? " " : "", cpu_isa_name((cpu_isa_t)i));
}

tern_cpu_info_t tern_cpu_info(void) {
    static pthread_once_t caps_once = PTHREAD_ONCE_INIT;
    pthread_once(&caps_once, caps_init);
    tern_cpu_info_t in;
    in.struct_size = sizeof in;
    in.detected = cpu_isa_name(cpu_isa_detected());
    in.effective = cpu_isa_name(cpu_isa_effective());
    in.onednn = onednn_isa_name((unsigned)dnnl_get_effective_cpu_isa());
    in.int8_gemm = linear_int8_backend_name();
    in.caps = caps_text;
    return in;
}
