// Communicators: a fixed group of ranks that sum, broadcast and wait for each other.
//
// The host backend here serves ranks that are threads of one process (DESIGN: one process per
// node, one thread per local GPU or CPU rank): they share memory, so a collective is every rank
// posting its buffer and the ranks then working on disjoint slices of the result. NCCL (GPU
// ranks) and TCP (ranks on other nodes) will sit behind the same calls.
//
// Guarantees every backend keeps:
// - Determinism: an allreduce sums each element in rank order, ((x0 + x1) + x2) + ..., in the
//   buffer's own type, whichever thread arrives first; every rank gets the same bits, every run.
// - Agreement: every rank must make the same sequence of collectives with the same type, length
//   and root. A rank that calls something else (a different bucket size, a broadcast against an
//   allreduce: the silent DDP misconfigurations) is an error that names both ranks' calls.
// - No hangs: a rank that does not arrive within the group's timeout ends the wait on every
//   waiting rank with an error naming the missing ranks and the collective. comm_abort (a rank
//   that fails for its own reason) wakes everybody at once with that rank's message.
// Errors die (ct_die) unless the group was made with comm_group_set_error_mode(g, 1), where the
// collective returns -1 and comm_error() holds the message (tests, and callers that clean up).
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CommGroup CommGroup;
typedef struct Comm Comm;

// A group of `size` ranks in this process. timeout_s > 0: the longest any rank waits for the
// others inside one collective.
CommGroup *comm_group_create(int size, double timeout_s);
// Rank r's handle. Each handle is used by one thread at a time: a rank's trainer thread and its
// gradient thread (dist/gradsync.h) share it, one after the other, never at once.
Comm *comm_group_rank(CommGroup *g, int r);
void comm_group_free(CommGroup *g);
// 0 (default): errors die. 1: collectives return -1 with the message in comm_error.
void comm_group_set_error_mode(CommGroup *g, int return_errors);
// A multi-node run: this group is one node's ranks, net links the nodes (dist/net.h). From then
// on comm_rank/comm_size are global (net_rank_offset + local rank, net_world), and every
// collective spans all nodes. Set before the first collective.
struct NodeNet;
void comm_group_set_net(CommGroup *g, struct NodeNet *net);

int comm_rank(const Comm *c);  // global
int comm_size(const Comm *c);  // global

// buf[0, n) = sum over ranks of every rank's buf[0, n). Returns 0, or -1 (error mode 1).
int comm_allreduce_f32(Comm *c, float *buf, size_t n);
int comm_allreduce_f64(Comm *c, double *buf, size_t n);
int comm_allreduce_i64(Comm *c, int64_t *buf, size_t n);
// buf[0, bytes) of rank root to every rank.
int comm_broadcast(Comm *c, void *buf, size_t bytes, int root);
int comm_barrier(Comm *c);
// This rank gives up: every rank's current or next collective fails with msg (naming this rank).
void comm_abort(Comm *c, const char *msg);
// The last error of this rank's handle ("" if none).
const char *comm_error(const Comm *c);

#ifdef __cplusplus
}
#endif
