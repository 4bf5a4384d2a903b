/* cxl_coll.h: the pool collectives for one rank (allgather, barrier, broadcast, allreduce,
 * reduce_scatter block, alltoall), in both coherence modes. The step machinery, the flag
 * protocol and barrier are in cxl_coll_core.h; the collectives that move data in
 * cxl_coll_move.h, those that fold it in cxl_coll_reduce.h. */
#ifndef CXLSIM_CXL_COLL_H
#define CXLSIM_CXL_COLL_H

#include "cxl_coll_core.h"
#include "cxl_coll_move.h"
#include "cxl_coll_reduce.h"

#endif
