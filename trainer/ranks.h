// The ranks of this process: with --nodes, the rendezvous with the other nodes (dist/net.h) makes
// the ranks global; a Run per local rank (rank 0's on the main thread, the others on threads of
// their own); the gradient averagers; the check that every replica holds rank 0's weights.
#pragma once
#include "dist/comm.h"
#include "dist/net.h"
#include "trainer/backend.h"
#include "trainer/config.h"
#include "trainer/data.h"
#include "trainer/run.h"
#include "trainer/step.h"

typedef struct {
    int local;   // ranks in this process (--ranks)
    int offset;  // global rank of the first
    int world;   // ranks of the whole run
    CommGroup *group;  // NULL with one rank in one process
    NodeNet *net;      // NULL with one node
    BackendGroup *backend_group;
    Run *runs;   // [local]
} Ranks;

// Meets the other nodes (dies naming the node and the problem), then sets up every local rank's
// run. Training runs get their gradient averagers.
void ranks_create(Ranks *rs, const Config *c, const ConfigGiven *given, const Dataset *d, BackendKind kind);
void ranks_destroy(Ranks *rs);
// Global rank 0 lives in this process: it writes the outputs.
int ranks_lead(const Ranks *rs);

// Runs the epoch loop (or, with evaluate_only, one evaluation) on every local rank. Returns rank
// 0's status (trainer/loop.h) and its evaluation.
int ranks_run(Ranks *rs, int evaluate_only, EvalResult *eval0);

