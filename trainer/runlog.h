// What a run tells its user, written by rank 0 only: the banner, the live progress line (plain
// lines when stderr is not a terminal), OUT/metrics.jsonl, TensorBoard events, OUT/config.json,
// the starved-loader warning and the closing summary.
//
// metrics.jsonl holds one flat JSON object per line ("type": "step" | "epoch" | "skip"). Wall-clock
// fields are "time", "img_s", "data_wait", "epoch_time" and "eval_time"; everything else is a pure
// function of the flags and the data (tests compare the lines with those fields removed).
#pragma once
#include <stdint.h>
#include <stdio.h>

#include "util/tfevents.h"

typedef struct {
    double t_start;      // this process's training start
    int64_t total_steps;
    int64_t steps_done;  // steps run by this process (for the ETA)
    double t_last, wait_last;
    int64_t seen_last;   // samples at t_last
    double t_draw;
    int drawn;           // a live line is on screen
} Progress;

typedef struct {
    char out[900];
    FILE *metrics;
    TfEvents *tb;
    int tty;
    double time_offset;  // a resumed run: the metrics' clock continues from the last record kept
    Progress progress;
} RunLog;

typedef struct Run Run;  // trainer/run.h

// Creates OUT (when needed), config.json, metrics.jsonl and the events file. A resume into the
// same directory (keep_up_to_step >= 0) drops the metrics written after the checkpoint's step, so
// the file reads like one uninterrupted run.
RunLog *runlog_open(const char *out, int64_t keep_up_to_step);
void runlog_close(RunLog *log);
// OUT/name (dies when log is NULL: only rank 0 writes files).
void runlog_path(const RunLog *log, char *buf, size_t n, const char *name);

// config.json: every setting, what was derived from the data, the command (and every command that
// ran the run: "commands", kept across resumes), ctrain's commit, the machine.
void runlog_write_config(RunLog *log, const Run *r, int argc, char **argv);
void runlog_banner(const Run *r);

// One training step, as seen after the step's reduction over ranks.
typedef struct {
    int epoch, epochs;  // 1-based
    int64_t step_in_epoch, steps_per_epoch;
    int64_t step;       // steps done in the whole run
    float loss;
    double lr;
    int64_t correct, n;  // this step, over all ranks
    double epoch_loss_sum;
    int64_t epoch_seen;
    double data_wait;   // the loader's total wait so far, seconds
    int record;         // a record step: every --print-freq and the epoch's last
    int res;            // the training resolution of this epoch (progressive resizing)
} StepReport;

void runlog_train_start(RunLog *log, int64_t total_steps);
void runlog_epoch_start(RunLog *log, double data_wait, int64_t epoch_seen);
// Every step: redraws the live line (at most 4 times a second) and, on record steps, writes the
// step record.
void runlog_step(RunLog *log, const StepReport *s);
void runlog_skip(RunLog *log, int epoch, int64_t step, double lr, float loss, int consecutive);
// Clears the live line before other output.
void runlog_clear_line(RunLog *log);

typedef struct {
    int epoch, epochs;  // 1-based
    int64_t step;
    double train_loss, train_top1;
    double val_loss, val_top1, val_top5;
    int best;  // the best val top-1 so far, of either model
    int ema;   // --ema: the average's evaluation follows
    double ema_loss, ema_top1, ema_top5;
    double lr;
    uint32_t skipped_steps;
    double train_time, eval_time, img_s, data_wait;  // data_wait: share of train_time
    int workers;
    int res, val_res;  // training resolution of the epoch, evaluation's
    uint32_t bad_records;  // samples whose train record failed and was skipped this epoch
} EpochReport;

// The epoch's summary line, its record and events, and the warning when the loader starved it.
void runlog_epoch(RunLog *log, const EpochReport *e);

// "1:02:03" or "2:03"; "--:--" when unknown.
void runlog_fmt_duration(char *buf, size_t n, double seconds);
