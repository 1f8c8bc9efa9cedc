// The data of a run: the train and val shards (opened, checked against each other, mapped once
// per process and shared by its ranks), the normalisation, each rank's loaders over its share,
// and the --demo's Fashion-MNIST shards, packed on first use.
#pragma once
#include <stdint.h>

#include "loader/loader.h"
#include "loader/shard.h"
#include "trainer/backend.h"
#include "trainer/config.h"

typedef struct {
    Shard train, val;
    int have_train;          // --evaluate opens only val
    int channels, classes;
    uint64_t class_hash;
    float *mean, *std;       // [channels]
} Dataset;

// Opens SHARDS/val.shard (and train.shard unless --evaluate) and checks them against each other
// and the flags; resolves --mean/--std. Dies naming the file or flag at fault.
void dataset_open(Dataset *d, const Config *c);
void dataset_close(Dataset *d);
// --mean/--std "auto": ImageNet's for 3 channels, 0.5/0.25 otherwise (also for model files that
// do not record their normalisation).
void dataset_auto_norm(int channels, float *mean, float *std);

// One rank's loaders over its exact share of every epoch.
typedef struct {
    Loader *train, *val;
    int64_t steps_per_epoch;  // training batches of one epoch (the last partial global batch dropped)
} RankLoaders;

void loaders_create(RankLoaders *l, const Dataset *d, const Config *c, BackendKind kind, int rank, int world);
void loaders_destroy(RankLoaders *l);

// Packs Fashion-MNIST into DEMO_SHARDS on first use (installs Debian's dataset when root).
void demo_prepare(void);
