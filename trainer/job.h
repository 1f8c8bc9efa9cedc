// What one `train` process does, start to end: resolve the device and precision, open the data,
// set up its ranks, then train (outputs, banner, the epoch loops, the final model and summary) or
// only evaluate. main.c is this file's caller.
#pragma once
#include "trainer/config.h"
#include "trainer/data.h"
#include "trainer/ranks.h"

typedef struct {
    Config cfg;
    ConfigGiven given;
    BackendKind backend;
    Dataset data;
    Ranks ranks;
    double t_start;
} Job;

// Dies with a message naming the flag, variable or file at fault.
void job_create(Job *job, const Config *c, const ConfigGiven *given);
void job_destroy(Job *job);
// Prints val loss, top-1 and top-5 of the given weights. Returns the exit status.
int job_evaluate(Job *job);
// Trains to --epochs; returns 0, or 128 + the signal that stopped it after a checkpoint.
int job_train(Job *job, int argc, char **argv);
