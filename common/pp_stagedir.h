/* pp_stagedir.h — the files of a stage directory, in one place: ppc writes them (-o DIR) and ppr
 * reads them. Included by both (docs/stage-format.md). */
#ifndef PP_STAGEDIR_H
#define PP_STAGEDIR_H

/* The version of the listing format: a listing's first line is 'ppr-program N', and ppr reads this
 * one alone (docs/stage-format.md, the listing's first line) */
#define PP_PROG_VERSION 5

/* The training program of world rank R, and the kernels of stage S it names (NAME.so, .cl,
 * .cubin, .ptx; ppc keeps NAME.c and NAME.cu beside them). */
#define PP_PROG_FMT    "rank%d.prog"
#define PP_KERNELS_FMT "kernels_s%d"

/* With ppc --generate, the generation program of rank R (ppr --generate, --sample-every): the
 * same parameters as the training program, one sequence through the forward alone, its
 * schedule named PP_SCHED_FORWARD; and its stage's kernels. */
#define PP_GEN_PROG_FMT    "rank%d.gen.prog"
#define PP_GEN_KERNELS_FMT "gen_s%d"
#define PP_SCHED_FORWARD   "forward"

#endif /* PP_STAGEDIR_H */
