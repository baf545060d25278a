/*
 * process_env.h — process-wide settings `tern` starts with (main() calls
 * cli_process_defaults(argv) first thing). Process-level behaviour (re-executing the program,
 * malloc tuning) belongs to the executable, not the library: the library changes no global
 * state; programs that embed it may want to do the same in their own main().
 *
 * - OpenMP waiting. libgomp reads its environment once, when it is loaded (before main). Its
 *   default wait policy spins for milliseconds after every parallel region, which costs Tern up to
 *   10x on machines whose cores also run other work (numbers in gemm.c). When the user set neither
 *   GOMP_SPINCOUNT nor OMP_WAIT_POLICY, GOMP_SPINCOUNT=3000 (about 0.1 ms of spinning) is set and
 *   the program re-executed (its path read from /proc/self/exe) with the same arguments so that
 *   libgomp sees it. Setting GOMP_SPINCOUNT (any value) turns this off.
 * - glibc malloc. Its mmap threshold grows to the size of every large block freed (up to 32 MB);
 *   loading a model frees hundreds of MB of such blocks (weights given back after packing), after
 *   which the per-batch buffers of varying sizes come from the heap and fragment it: the resident
 *   size of a beam-search run grew from 0.6 to 1.1 GB over the WMT22 test set. The threshold is
 *   fixed at 256 KB (large buffers are mapped and unmapped, as before the first free).
 *
 * Returns only when it did not re-execute.
 */
#ifndef TERN_CLI_PROCESS_ENV_H
#define TERN_CLI_PROCESS_ENV_H

void cli_process_defaults(char **argv);

#endif
