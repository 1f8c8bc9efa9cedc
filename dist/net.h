// Nodes of a multi-node run over TCP: one process per node, node 0 listening on --master's port.
//
// The rendezvous: every node connects to node 0 (retrying until the timeout: nodes start in any
// order), says who it is (node number, node count, ranks on it) and sends the settings that must
// agree, as text, and node 0 answers when all have come. A node with other settings (each one that
// differs named, with both values), a duplicate or out-of-range node number, or another node count
// is refused with an error naming it, on both sides. After that, collectives between the nodes go through node 0 (star): a node sends its
// buffer, node 0 combines in node order and sends the result back, so every node gets the same
// bits. Every message carries the collective's kind, sequence number and size, so nodes that
// disagree (a misconfiguration) fail with both calls named; a node that dies or stalls ends the
// others' wait with an error naming it after the timeout.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct NodeNet NodeNet;

// host:port of node 0 (node 0 binds port on all interfaces). settings: what every node must agree
// on, one "name<TAB>value" line each (compared as text; the names appear in a refusal). Returns
// NULL with err on failure.
NodeNet *net_connect(int nodes, int node, const char *host, int port, const char *settings, int local_ranks,
                     double timeout_s, char *err, size_t errlen);
void net_close(NodeNet *n);
int net_node(const NodeNet *n);
// Global rank of this node's first rank (nodes in order, each with its local rank count).
int net_rank_offset(const NodeNet *n);
int net_world(const NodeNet *n);  // ranks over all nodes

// Element kinds for net_allreduce.
enum { NET_F32 = 0, NET_F64 = 1, NET_I64 = 2 };
// buf[0, n) = sum over nodes (in node order). 0, or -1 with err.
int net_allreduce(NodeNet *net, int kind, void *buf, size_t n, char *err, size_t errlen);
// buf of node root to every node.
int net_broadcast(NodeNet *net, void *buf, size_t bytes, int root, char *err, size_t errlen);
int net_barrier(NodeNet *net, char *err, size_t errlen);

// The first host of a SLURM node list ("gpu[07-09,12],cpu3" -> "gpu07", "a,b" -> "a"): node 0 of a
// SLURM job, for the rendezvous when MASTER_ADDR is not set. 0, or -1 if the list is malformed.
int net_first_host(const char *nodelist, char *out, size_t outlen);

#ifdef __cplusplus
}
#endif
