/* rt_mesh.h - the start-up checks that the ranks' listings make one mesh (rt_mesh.c). */
#ifndef RT_MESH_H
#define RT_MESH_H

#include <stddef.h>

#include "rt_comm.h"
#include "rt_prog.h"

/* Checks, on every rank at once, that the world's listings make one mesh: one rank per
 * (stage, tp_rank, dp_rank), the same mesh, step, vocab, model and model_param list, each rank's
 * peers the neighbouring stages' ranks, the boundary sizes of neighbours equal, the same schedule
 * and tp collectives in every TP group and the same dp collectives in every DP group, every shared
 * param in a group of two or more with equal allreduce_tied sizes, the micro-batch tags within the
 * library's range, every model_param owned exactly once by the ranks of dp_rank 0 (whole by one
 * rank, or its dense rows by shards), and every message of the schedules matched by its partner
 * without a deadlock (simulated on rank 0 with the messages of rt_boundary_msg). Collective; on
 * failure every rank returns -1 with the same message. dir names the listings in messages.
 * *model_tied: some rank's program has a tied param. */
int rt_mesh_check(RtComm *c, const RtProg *p, const char *dir, int *model_tied, char *err, size_t errlen);

#endif /* RT_MESH_H */
