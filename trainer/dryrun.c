// --dry-run and the checks before the leap (trainer/dryrun.h).
#include "trainer/dryrun.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "loader/shard.h"
#include "nn/resnet.h"
#include "trainer/settings.h"
#include "util/common.h"

int64_t dryrun_checkpoint_bytes(const char *arch, int channels, int classes, int blurpool, int momentum, int ema) {
    ResNet *m = resnet_create_ex(arch, channels, classes, blurpool);
    if (!m) return -1;
    // nn/checkpoint.h's layout: the head, the flat arrays, a checksum (the settings text aside).
    int64_t b = 8 + 4 + 4 + 192 + 4 * (int64_t)m->n_params * (1 + (momentum != 0) + (ema != 0)) +
                4 * (int64_t)m->n_bufs * (1 + (ema != 0)) + 8 * (int64_t)m->n_counts + 4;
    resnet_free(m);
    return b;
}

int64_t dryrun_free_bytes(const char *dir) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", dir[0] ? dir : ".");
    // The nearest directory that exists: the run's is made at start.
    for (int i = 0; i < 64; i++) {
        struct statvfs st;
        if (statvfs(p, &st) == 0) return (int64_t)st.f_bavail * (int64_t)st.f_frsize;
        char *slash = strrchr(p, '/');
        if (!slash) snprintf(p, sizeof p, ".");
        else if (slash == p) p[1] = 0;
        else *slash = 0;
    }
    return -1;
}

static void fmt_bytes(char *buf, size_t n, int64_t b) {
    if (b < 0) snprintf(buf, n, "unknown");
    else if (b >= (int64_t)1 << 30) snprintf(buf, n, "%.1f GB", (double)b / (1 << 30));
    else snprintf(buf, n, "%.1f MB", (double)b / (1 << 20));
}

void dryrun_lr_note(const Config *c, const ConfigGiven *given, int global_batch, FILE *f) {
    if (config_given(given, "lr") || given->demo[config_flag("lr") - CONFIG_FLAGS] ||
        given->resumed[config_flag("lr") - CONFIG_FLAGS] || global_batch == 256)
        return;
    fprintf(f, "train: note: --lr %g is the default, tuned for a global batch of 256; this run's is %d, for which the "
               "linear scaling rule gives --lr %g (0.1 x %d / 256); a rate too high for the batch diverges\n",
            c->lr, global_batch, 0.1 * global_batch / 256, global_batch);
}

void config_flag_source(const Config *c, const ConfigGiven *g, int i, char *buf, size_t n) {
    const Flag *fl = &CONFIG_FLAGS[i];
    if (g->env[i]) snprintf(buf, n, "environment $%s (alias)", g->env[i]);
    else if (g->flag[i] && g->config_line[i]) snprintf(buf, n, "recipe %s:%d", g->config_file, g->config_line[i]);
    else if (g->flag[i]) snprintf(buf, n, "command line");
    else if (g->resumed[i]) snprintf(buf, n, "recorded in %s", g->resumed_from ? g->resumed_from : c->resume[0] ? c->resume : c->weights);
    else if (g->demo[i]) snprintf(buf, n, "--demo");
    else if (!strcmp(fl->name, "nodes") && g->nodes_from && strcmp(g->nodes_from, "--nodes")) snprintf(buf, n, "environment $%s", g->nodes_from);
    else if (!strcmp(fl->name, "node-rank") && g->node_rank_from && strcmp(g->node_rank_from, "--node-rank")) snprintf(buf, n, "environment $%s", g->node_rank_from);
    else if (!strcmp(fl->name, "master") && g->master_from && strcmp(g->master_from, "--master")) snprintf(buf, n, "environment $%s", g->master_from);
    else if ((!strcmp(fl->name, "ranks") || !strcmp(fl->name, "device")) && config_given(g, "gpus")) snprintf(buf, n, "--gpus");
    else snprintf(buf, n, "default%s", c->was_auto[i] ? " (auto)" : "");
}

int dryrun_main(const Config *c, const ConfigGiven *given) {
    printf("train --dry-run: the resolved settings (nothing is trained, nothing written)\n\n");
    printf("  %-22s %-34s %s\n", "flag", "value", "from");
    for (int i = 0; i < CONFIG_N_FLAGS; i++) {
        const Flag *fl = &CONFIG_FLAGS[i];
        char v[4096], src[1200];
        settings_flag_text(c, fl, v, sizeof v);
        if (fl->type == F_STR && !v[0]) snprintf(v, sizeof v, "(none)");
        config_flag_source(c, given, i, src, sizeof src);
        printf("  --%-20s %-34s %s\n", fl->name, v, src);
    }
    printf("  %-22s %-34s %s\n", "SHARDS", c->shards, given->resumed_from && !config_given(given, "out") ? "recorded" : "command line");
    int world = c->ranks * c->nodes, global = c->batch * world;
    printf("\n  global batch: %d (batch %d x %d rank%s x %d node%s)\n", global, c->batch, c->ranks, c->ranks > 1 ? "s" : "",
           c->nodes, c->nodes > 1 ? "s" : "");
    // The data, as train would open it (the payloads are not read).
    char p[PATH_MAX + 32], err[SHARD_ERR_LEN];
    Shard tr, va;
    int have_tr = 0, have_va = 0, channels = 3, classes = 1000;
    snprintf(p, sizeof p, "%s/train.shard", c->shards);
    if (!c->evaluate) {
        if (shard_open_err(&tr, p, err, sizeof err) == 0) have_tr = 1;
        else printf("  train data: %s\n", err);
    }
    snprintf(p, sizeof p, "%s/val.shard", c->shards);
    if (shard_open_err(&va, p, err, sizeof err) == 0) have_va = 1;
    else printf("  val data: %s\n", err);
    if (have_tr) {
        int64_t spe = global > 0 ? (int64_t)(tr.n_records / (uint64_t)global) : 0;
        // Repeated augmentation keeps the peers' epoch: floor(n / 256) * 256 / ranks samples a rank.
        if (c->ra_repeats > 1 && global > 0 && c->batch > 0)
            spe = (int64_t)((tr.n_records / 256 * 256) / (uint64_t)(global / c->batch) / (uint64_t)c->batch);
        printf("  train data: %s/train.shard, %llu records, %u classes, %u channel(s)\n", c->shards,
               (unsigned long long)tr.n_records, tr.n_classes, tr.channels);
        printf("  steps per epoch: %lld (the last partial %s dropped), %lld steps in %d epochs\n", (long long)spe,
               c->ra_repeats > 1 ? "batch of the repeated-augmentation epoch" : "global batch",
               (long long)spe * c->epochs, c->epochs);
        if (spe < 1) printf("  warning: fewer train records than one global batch: train would refuse to start\n");
        channels = (int)tr.channels;
        classes = (int)tr.n_classes;
    }
    if (have_va) {
        printf("  val data: %s/val.shard, %llu records\n", c->shards, (unsigned long long)va.n_records);
        channels = (int)va.channels;
        classes = (int)va.n_classes;
    }
    if (have_tr) shard_close(&tr);
    if (have_va) shard_close(&va);
    int64_t ck = dryrun_checkpoint_bytes(c->arch, channels, classes, c->blurpool, c->momentum > 0, c->ema > 0);
    int64_t fr = dryrun_free_bytes(c->out[0] ? c->out : "runs");
    char cks[32], frs[32];
    fmt_bytes(cks, sizeof cks, ck);
    fmt_bytes(frs, sizeof frs, fr);
    printf("  model: %s, %d classes, %d channel(s); checkpoint about %s (last.ckpt and best.ckpt: two)\n", c->arch, classes,
           channels, cks);
    printf("  output: %s; free disk there: %s\n", c->out[0] ? c->out : "runs/DATE-ARCH (chosen at start)", frs);
    if (ck > 0 && fr >= 0 && fr < 2 * ck) printf("  warning: the disk cannot hold two checkpoints\n");
    fflush(stdout);
    dryrun_lr_note(c, given, global, stdout);
    return 0;
}
