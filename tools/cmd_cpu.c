/* cmd_cpu.c — `tern cpu`: the instruction sets Tern runs with on this CPU (tern_cpu_info). */
#include <string.h>

#include "cli.h"
#include "kernels/cpu_isa.h"
#include "kernels/gemm_packed.h"
#include "kernels/kernels.h"

int cmd_cpu(int argc, char **argv) {
    int caps_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: tern cpu [--caps]\n\n"
                   "Prints the instruction sets this CPU supports, the ones Tern and oneDNN use after the\n"
                   "caps TERN_MAX_CPU_ISA and ONEDNN_MAX_CPU_ISA (AVX2, AVX512_CORE, AVX512_CORE_VNNI,\n"
                   "AVX512_CORE_BF16, AVX512_CORE_AMX, ALL), the int8 GEMM and the float32 kernel the\n"
                   "linear layers run.\n"
                   "Tern needs an x86-64-v3 CPU (AVX2 + FMA); everything above is chosen at run time.\n\n"
                   "  --caps   print only the cap values this CPU can run, one per line, lowest first\n"
                   "           (what scripts/test.sh loops over)\n");
            return 0;
        } else if (!strcmp(argv[i], "--caps")) {
            caps_only = 1;
        } else {
            fprintf(stderr, "tern cpu: unexpected argument '%s'; see tern cpu --help\n", argv[i]);
            return 2;
        }
    }
    tern_cpu_info_t in = tern_cpu_info();
    if (caps_only) {
        for (const char *p = in.caps; *p; p++) putchar(*p == ' ' ? '\n' : *p);
        putchar('\n');
        return 0;
    }
    printf("detected: %s\n", in.detected);
    printf("tern isa: %s (TERN_MAX_CPU_ISA)\n", in.effective);
    printf("onednn isa: %s (ONEDNN_MAX_CPU_ISA)\n", in.onednn);
    printf("int8 gemm: %s\n", in.int8_gemm);
    printf("int8 packed linear: %s\n", linear_int8_packed_kernel_name());
    printf("avx512 width: %s\n", cpu_isa_detected() < CPU_ISA_AVX512_CORE ? "none"
                                  : cpu_avx512_halves()                  ? "two 256-bit halves (AMD Zen 4)"
                                                                         : "512-bit");
    printf("float32 linear: %s\n", gemm_packed_f32_backend_name());
    printf("caps: %s\n", in.caps);
    return 0;
}
