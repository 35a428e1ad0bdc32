/* rt_dev_cpu.h - what only the cpu device (rt_dev_cpu.c) offers beside the device interface:
 * OpenBLAS's set-up before main, the threads ranks on one machine share, and oneDNN's presence. */
#ifndef RT_DEV_CPU_H
#define RT_DEV_CPU_H

/* The cpu device's GEMMs are OpenBLAS's, which reads its settings from the environment when the
 * library loads, before main. Call first in main, before any thread or MPI; when it changes the
 * environment it executes the program again (argv), which then loads OpenBLAS so; else it returns.
 * - OPENBLAS_CORETYPE, when unset and the loaded core is weaker than the CPU's own instructions
 *   say (AVX-512 F/BW/DQ/VL: SkylakeX; AVX2 and FMA: Haswell): on a virtual machine that hides
 *   the CPU's model OpenBLAS falls back to a generic x86-64 core (Prescott: SSE3 alone, a sixth of
 *   this CPU's SGEMM).
 * - OPENBLAS_THREAD_TIMEOUT=4, when unset: OpenBLAS's worker threads sleep at once after a GEMM
 *   instead of spinning for 2^28 cycles in sched_yield, which took the cores from the kernels'
 *   OpenMP threads (docs/perf.md, "Threads").
 * Before executing it, the first thread gets back the CPUs of all of libgomp's places: under
 * OMP_PROC_BIND libgomp has bound it to the first, and the program run again would take that one
 * CPU for all it may use. */
void rt_dev_cpu_blas_core(char **argv);
/* The threads of each of the local_ranks ranks on this machine (the kernels' OpenMP threads, which
 * also share the GEMMs) when neither OMP_NUM_THREADS nor OPENBLAS_NUM_THREADS is set: the machine's
 * CPUs shared among its ranks (at least 1 each, at most the CPUs this process may run on), so that
 * ranks do not each start a thread per CPU and spin against each other. Call before the device
 * opens. Returns the threads it set, or 0 where it left the count as it was (one rank, a count set
 * in the environment, or no fewer threads than before). */
int rt_dev_cpu_share_cores(int local_ranks);
/* OpenBLAS's core, as the cpu device's description shows it. */
const char *rt_dev_cpu_blas_name(void);
int rt_dev_cpu_onednn(void); /* 1 when ppr was built with oneDNN (--onednn) */

#endif /* RT_DEV_CPU_H */
