/* nodes.c: allgather and allreduce on a communicator whose ranks span several nodes.
 *
 * Each node's ranks share a flat pool; each node's lowest rank is its leader, and the leaders
 * talk through PMPI:
 *   allreduce  pool allreduce in the node -> leaders' PMPI_Allreduce (in place) -> pool
 *              broadcast from the leader in the node;
 *   allgather  pool allgather in the node -> leaders' PMPI_Allgatherv of whole nodes -> blocks
 *              put in communicator-rank order -> pool broadcast of the P blocks in the node.
 * A node's ranks need not be contiguous in the communicator. CXLSIM_MPI_FAKE_NODES=k fakes k
 * nodes on one machine (rank r on node r % k), so the path is tested here. Every rank of every
 * node gets bitwise the same result (the leaders' reduction is MPI's, the broadcast copies it);
 * the float result can differ in its last bits from a flat pool's left fold over all ranks.
 */
#include <stdlib.h>
#include <string.h>

#include "cxlsim_mpi.h"

void cxlsim_nodes_free(cxlsim_nodes_t *nodes)
{
    if (nodes->node_pool) cxlsim_pool_destroy(nodes->node_pool);
    if (nodes->leader_comm != MPI_COMM_NULL) PMPI_Comm_free(&nodes->leader_comm);
    if (nodes->node_comm != MPI_COMM_NULL) PMPI_Comm_free(&nodes->node_comm);
    free(nodes->order);
    free(nodes->counts);
    free(nodes->first);
    free(nodes);
}

int cxlsim_nodes_setup(cxlsim_pool_t *pool, MPI_Comm node_comm)
{
    cxlsim_nodes_t *n = calloc(1, sizeof *n);
    int node_rank, P = pool->size, leader, is_leader;
    n->node_comm = node_comm;
    n->leader_comm = MPI_COMM_NULL;
    PMPI_Comm_rank(node_comm, &node_rank);
    is_leader = node_rank == 0;
    PMPI_Comm_split(pool->comm, is_leader ? 0 : MPI_UNDEFINED, pool->rank, &n->leader_comm);
    /* every rank learns each rank's leader (its node's lowest communicator rank) */
    leader = pool->rank;
    PMPI_Bcast(&leader, 1, MPI_INT, 0, node_comm);
    int *leader_of = malloc(sizeof(int) * (size_t)P);
    PMPI_Allgather(&leader, 1, MPI_INT, leader_of, 1, MPI_INT, pool->comm);
    n->order = malloc(sizeof(int) * (size_t)P);
    n->counts = calloc((size_t)P, sizeof(MPI_Count));
    n->first = calloc((size_t)P, sizeof(MPI_Count));
    int used = 0;
    for (int l = 0; l < P; l++) { /* nodes in their leaders' order, as leader_comm ranks them */
        if (leader_of[l] != l) continue;
        n->first[n->nnodes] = used;
        for (int r = 0; r < P; r++)
            if (leader_of[r] == l) n->order[used++] = r;
        n->counts[n->nnodes] = used - n->first[n->nnodes];
        n->nnodes++;
    }
    free(leader_of);
    n->node_pool = cxlsim_pool_flat(node_comm);
    int ok = n->node_pool->usable, all = 0;
    PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, pool->comm);
    if (!all) {
        cxlsim_nodes_free(n);
        return 0;
    }
    pool->nodes = n;
    cxlsim_log(2, "hierarchical pool for a communicator of %d ranks on %d nodes", P, n->nnodes);
    return 1;
}

int cxlsim_nodes_allreduce(cxlsim_nodes_t *n, const char *send, char *recv, MPI_Count count, int dtype, int op,
                           MPI_Datatype type, MPI_Op mpi_op, cxlsim_pool_t **timed_out)
{
    cxl_coll_t *c = &n->node_pool->coll;
    *timed_out = n->node_pool;
    if (cxl_coll_allreduce(c, send, recv, (uint64_t)count, dtype, op, cxlsim_settings.large_bytes)) return CXL_COLL_TIMEOUT;
    if (n->leader_comm != MPI_COMM_NULL) PMPI_Allreduce_c(MPI_IN_PLACE, recv, count, type, mpi_op, n->leader_comm);
    return cxl_coll_broadcast(c, recv, (uint64_t)count * cxl_dtype_size[dtype], 0);
}

int cxlsim_nodes_allgather(cxlsim_nodes_t *n, const char *send, char *recv, uint64_t nbytes,
                           cxlsim_pool_t **timed_out)
{
    cxl_coll_t *c = &n->node_pool->coll;
    int P = 0;
    *timed_out = n->node_pool;
    PMPI_Comm_size(n->node_pool->comm, &P);
    char *mine = malloc(nbytes * (uint64_t)P);
    int rc = cxl_coll_allgather(c, send, mine, nbytes);
    if (rc == CXL_COLL_OK && n->leader_comm != MPI_COMM_NULL) {
        uint64_t total = 0;
        MPI_Count *counts = malloc(sizeof(MPI_Count) * (size_t)n->nnodes);
        MPI_Aint *displs = malloc(sizeof(MPI_Aint) * (size_t)n->nnodes);
        for (int j = 0; j < n->nnodes; j++) {
            counts[j] = n->counts[j] * (MPI_Count)nbytes;
            displs[j] = (MPI_Aint)(n->first[j] * (MPI_Count)nbytes);
            total += (uint64_t)counts[j];
        }
        char *by_node = malloc(total);
        PMPI_Allgatherv_c(mine, (MPI_Count)(nbytes * (uint64_t)P), MPI_BYTE, by_node, counts, displs, MPI_BYTE,
                          n->leader_comm);
        for (uint64_t i = 0; nbytes && i < total / nbytes; i++) /* node-major order -> communicator order */
            memcpy(recv + (uint64_t)n->order[i] * nbytes, by_node + i * nbytes, nbytes);
        free(by_node);
        free(counts);
        free(displs);
    }
    free(mine);
    if (rc != CXL_COLL_OK) return rc;
    uint64_t ranks = (uint64_t)(n->first[n->nnodes - 1] + n->counts[n->nnodes - 1]);
    return cxl_coll_broadcast(c, recv, nbytes * ranks, 0);
}
