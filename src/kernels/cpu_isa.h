/*
 * cpu_isa.h — which x86-64 instruction sets Tern's own vector code may use, decided at run time.
 *
 * Tern is built for x86-64-v3 (AVX2, FMA, BMI2: `-march=x86-64-v3`), so one binary runs on every
 * such CPU. Code that needs more (AVX-512, VNNI, BF16, AMX) is chosen at run time from what the
 * CPU reports (CPUID and the OS's XSAVE state), capped from the outside by the environment
 * variable TERN_MAX_CPU_ISA, which works like oneDNN's ONEDNN_MAX_CPU_ISA and takes the same
 * names (case-insensitive): AVX2, AVX512_CORE, AVX512_CORE_VNNI, AVX512_CORE_BF16,
 * AVX512_CORE_AMX, ALL (no cap, the default). A developer on an AVX-512 machine runs
 * `TERN_MAX_CPU_ISA=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 ...` to take the paths an AVX2-only CPU takes.
 * An unknown name is reported once on stderr and treated as AVX2 (the safe floor).
 */
#ifndef TERN_KERNELS_CPU_ISA_H
#define TERN_KERNELS_CPU_ISA_H

/* Ordered: each level includes the ones below it. */
typedef enum {
    CPU_ISA_AVX2 = 0,             /* x86-64-v3: AVX2 + FMA (the build's baseline) */
    CPU_ISA_AVX512_CORE = 1,      /* + AVX512F/BW/DQ/VL */
    CPU_ISA_AVX512_CORE_VNNI = 2, /* + AVX512_VNNI (vpdpbusd: u8*s8 summed in 32 bits) */
    CPU_ISA_AVX512_CORE_BF16 = 3, /* + AVX512_BF16 */
    CPU_ISA_AVX512_CORE_AMX = 4,  /* + AMX-TILE/INT8/BF16 */
} cpu_isa_t;

/* What the CPU (and OS) supports, ignoring the cap. */
cpu_isa_t cpu_isa_detected(void);
/* min(detected, TERN_MAX_CPU_ISA): what Tern's dispatch uses. Read once per process. */
cpu_isa_t cpu_isa_effective(void);
/* 1 where the CPU has AVX-512 but runs each 512-bit operation as two halves on 256-bit units (AMD
 * Zen 4: family 19h), so that AVX2 FMA code reaches the same peak as AVX-512 code; 0 elsewhere. */
int cpu_avx512_halves(void);
/* "AVX2", "AVX512_CORE", ... */
const char *cpu_isa_name(cpu_isa_t isa);
/* Parses a TERN_MAX_CPU_ISA value; returns -1 for an unknown name. */
int cpu_isa_parse(const char *name);

#endif
