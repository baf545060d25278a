/*
 * omp_env.h — the OpenMP environment an executable should start with.
 *
 * libgomp reads its environment once, when it is loaded (before main). Its default wait policy
 * spins for milliseconds after every parallel region, which costs Tern up to 10x on machines whose
 * cores also run other work (numbers in gemm.c). An executable calls kernels_omp_env_default(argv)
 * first thing in main(): when the user set neither GOMP_SPINCOUNT nor OMP_WAIT_POLICY, it sets
 * GOMP_SPINCOUNT=3000 (about 0.1 ms of spinning) and re-executes the program (its path read from /proc/self/exe) with
 * the same arguments so that libgomp sees it. It returns only when it did not re-execute (a
 * variable was set, or exec failed). Setting GOMP_SPINCOUNT (any value) turns it off.
 */
#ifndef TERN_OMP_ENV_H
#define TERN_OMP_ENV_H

void kernels_omp_env_default(char **argv);

#endif
