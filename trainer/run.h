// One rank's run: the parts its files own, each a struct of its own. A process holds one Run per
// local rank (trainer/ranks.h); they share the settings and the dataset.
#pragma once
#include <stdint.h>

#include "dist/comm.h"
#include "nn/resnet.h"
#include "nn/schedule.h"
#include "nn/optim.h"
#include "trainer/backend.h"
#include "trainer/config.h"
#include "trainer/data.h"
#include "trainer/ema.h"
#include "trainer/faults.h"
#include "trainer/runlog.h"
#include "trainer/state.h"

// The model being trained, where it runs, and how it learns.
typedef struct {
    ResNet *net;              // host copy of the state (the live one on the CPU)
    Backend *backend;
    ResNet *teacher;          // --teacher, eval mode, or NULL
    Backend *teacher_backend;
    OptConfig optim;          // --optimizer and its settings (nn/optim.h)
    OptState opt;             // its state tensors, allocated only when training
    LrSchedule schedule;
    LossConfig loss;
    float *eval_dlogits;      // scratch of the eval loss [batch x classes]
    RunEma ema;               // --ema's average of the weights
} RunModel;

// This rank among all ranks of the run. Rank 0 writes every output; every rank keeps the same
// (global) bookkeeping.
typedef struct {
    int rank, world;
    int local_rank;  // among this process's ranks (which GPU it drives)
    Comm *comm;      // NULL with one rank
} RunRank;

typedef struct Run {
    const Config *cfg;
    const Dataset *data;
    RankLoaders loaders;
    RunModel model;
    Position pos;
    RunLog *log;  // rank 0 only, else NULL
    RunRank rank;
    Faults faults;
} Run;

// Everything one rank owns: its model replica (the same init on every rank: the seed decides),
// backend, loaders over its share, and for training the optimizer, schedule, teacher and the
// state of a resumed checkpoint. Dies naming the flag or file at fault.
void run_setup(Run *r, const Config *c, const Dataset *d, BackendKind kind, int rank, int world, int local_rank,
               Comm *comm);
void run_teardown(Run *r);
