// A train process from its settings to its exit status (trainer/job.h).
#include "trainer/job.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nn/safetensors.h"
#include "trainer/dryrun.h"
#include "trainer/loop.h"
#include "trainer/settings.h"
#include "util/common.h"

// The files a run writes into its directory (trainer/runlog.c, trainer/state.c); TensorBoard's
// event files are matched by prefix. One of them marks the directory as holding a run.
static const char *RUN_FILES[] = {"config.json", "metrics.jsonl", "last.ckpt", "best.ckpt", "model.safetensors",
                                  "best.safetensors"};
#define TFEVENTS_PREFIX "events.out.tfevents."

// The first file of a run in dir (written into name), or 0 when it holds none.
static int find_run_file(const char *dir, char *name, size_t n) {
    for (size_t i = 0; i < CT_ARRAY_LEN(RUN_FILES); i++) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof p, "%s/%s", dir, RUN_FILES[i]);
        if (ct_file_exists(p)) { snprintf(name, n, "%s", RUN_FILES[i]); return 1; }
    }
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d));)
        if (!strncmp(e->d_name, TFEVENTS_PREFIX, strlen(TFEVENTS_PREFIX))) {
            snprintf(name, n, "%s", e->d_name);
            found = 1;
        }
    closedir(d);
    return found;
}

// Whether the checkpoint at path lies in directory dir (the same directory, by inode).
static int resume_is_in(const char *path, const char *dir) {
    char *copy = ct_strdup(path);
    struct stat a, b;
    int same = stat(dirname(copy), &a) == 0 && stat(dir, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    free(copy);
    return same;
}

// --overwrite: remove what a run writes into dir (nothing else), so no old TensorBoard file or
// stale checkpoint sits beside the new run's.
static void remove_run_files(const char *dir) {
    char p[PATH_MAX + 300];
    for (size_t i = 0; i < CT_ARRAY_LEN(RUN_FILES); i++) {
        snprintf(p, sizeof p, "%s/%s", dir, RUN_FILES[i]);
        if (unlink(p) != 0 && errno != ENOENT) ct_die_errno("--overwrite: cannot remove %s", p);
    }
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, TFEVENTS_PREFIX, strlen(TFEVENTS_PREFIX))) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            if (unlink(p) != 0 && errno != ENOENT) ct_die_errno("--overwrite: cannot remove %s", p);
        }
    closedir(d);
}

// A run that failed before its first step (config.json and an empty metrics.jsonl, no checkpoint):
// nothing to continue or lose, so the same command may run again in its directory.
static int never_stepped(const char *dir) {
    char p[PATH_MAX + 64];
    static const char *keep[] = {"last.ckpt", "best.ckpt", "model.safetensors", "best.safetensors"};
    for (size_t i = 0; i < CT_ARRAY_LEN(keep); i++) {
        snprintf(p, sizeof p, "%s/%s", dir, keep[i]);
        if (ct_file_exists(p)) return 0;
    }
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    FILE *f = fopen(p, "r");
    if (!f) return 1;
    int c = fgetc(f);
    fclose(f);
    return c == EOF;
}

// The output directory, settled before any work: runs/DATE-ARCH (or the demo's runs/demo) with a
// suffix when that already holds a run; a --out given that holds a run is refused unless --resume
// continues from it or --overwrite replaces it. Only node 0 writes files, so only it checks.
static void choose_out_dir(Config *c, const ConfigGiven *given) {
    char name[300];
    int writes = c->node_rank == 0;
    if (!c->out[0] || (c->demo && !config_given(given, "out"))) {
        char base[256];
        if (c->out[0]) snprintf(base, sizeof base, "%s", c->out);
        else {
            char when[64];
            time_t now = time(NULL);
            strftime(when, sizeof when, "%Y%m%d-%H%M%S", localtime(&now));
            snprintf(base, sizeof base, "runs/%s-%s", when, c->arch);
        }
        char buf[300];
        snprintf(buf, sizeof buf, "%s", base);
        for (int k = 2; writes && find_run_file(buf, name, sizeof name); k++) snprintf(buf, sizeof buf, "%s-%d", base, k);
        c->out = ct_strdup(buf);
        return;
    }
    if (!writes || !find_run_file(c->out, name, sizeof name)) return;
    if (never_stepped(c->out)) {
        fprintf(stderr, "train: note: %s holds a run that stopped before its first step (no checkpoint, no metrics "
                        "record); its files are replaced\n", c->out);
        remove_run_files(c->out);
        return;
    }
    if (c->resume[0] && resume_is_in(c->resume, c->out)) {
        if (c->overwrite)
            ct_die("--overwrite would delete %s/ while --resume %s continues from it; drop --overwrite to continue the run",
                   c->out, c->resume);
        return;
    }
    if (!c->overwrite) {
        char cont[8192];
        settings_resume_command(c, c->out, cont, sizeof cont);
        ct_die("--out %s: already holds a run (%s); add --overwrite to replace it, continue it with: %s, "
               "or choose another --out", c->out, name, cont);
    }
}

// A model file's "blurpool" metadata (0 when absent or unreadable: loading it reports that).
static int st_file_blurpool(const char *path) {
    StFile f;
    char *err = st_open(path, &f);
    if (err) {
        free(err);
        return 0;
    }
    const char *v = st_meta(&f, "blurpool");
    int on = v && !strcmp(v, "1");
    st_close(&f);
    return on;
}

void job_create(Job *job, const Config *c, const ConfigGiven *given) {
    memset(job, 0, sizeof *job);
    job->cfg = *c;
    job->given = *given;
    Config *cfg = &job->cfg;
    job->backend = backend_resolve(cfg->device, cfg->ranks);
    cfg->device = backend_name(job->backend);
    if (!strcmp(cfg->precision, "auto")) cfg->precision = job->backend == BACKEND_CUDA ? "bf16" : "fp32";
    if (cfg->workers == 0) {
        cfg->workers = config_workers_auto(config_cpus_available(), cfg->ranks, job->backend == BACKEND_CUDA);
        cfg->workers_auto = 1;
    }
    job->t_start = ct_now();
    // An explicit --arch must match a checkpoint being resumed; without one, the checkpoint's is used.
    if (cfg->resume[0] && !config_given(given, "arch") && !cfg->demo) cfg->arch = state_checkpoint_arch(cfg->resume, "--resume");
    if (cfg->weights[0] && !config_given(given, "arch") && !cfg->demo && state_is_checkpoint(cfg->weights))
        cfg->arch = state_checkpoint_arch(cfg->weights, "--weights");
    // --blurpool likewise: without --blurpool/--no-blurpool, the network the weights were trained
    // as (a checkpoint's meta, a run's model.safetensors' "blurpool"; torchvision's files: none).
    if (!config_given(given, "blurpool") && !cfg->demo) {
        if (cfg->resume[0]) cfg->blurpool = state_checkpoint_blurpool(cfg->resume, "--resume");
        else if (cfg->weights[0] && state_is_checkpoint(cfg->weights))
            cfg->blurpool = state_checkpoint_blurpool(cfg->weights, "--weights");
        else if (cfg->weights[0]) cfg->blurpool = st_file_blurpool(cfg->weights);
    }
    if (!cfg->evaluate) choose_out_dir(cfg, given);
    if (cfg->demo) demo_prepare();
    dataset_open(&job->data, cfg);
    ranks_create(&job->ranks, cfg, &job->given, &job->data, job->backend);
}

void job_destroy(Job *job) {
    ranks_destroy(&job->ranks);
    dataset_close(&job->data);
}

int job_evaluate(Job *job) {
    const Config *c = &job->cfg;
    if (c->dump_batches[0]) ct_mkdir_p(c->dump_batches);
    double t0 = ct_now();
    EvalResult e;
    if (job->ranks.world == 1) e = step_evaluate(&job->ranks.runs[0], c->dump_batches[0] != 0);
    else ranks_run(&job->ranks, 1, &e);
    if (ranks_lead(&job->ranks))
        printf("evaluate %s on %s/val.shard: %lld images  loss %.4f  top-1 %.2f%%  top-5 %.2f%%  (%.1fs)\n",
               c->weights[0] ? c->weights : c->resume, c->shards, (long long)e.n, e.loss, e.top1, e.top5, ct_now() - t0);
    return 0;
}

int job_train(Job *job, int argc, char **argv) {
    Config *c = &job->cfg;
    Ranks *rs = &job->ranks;
    Run *r = &rs->runs[0];
    const int lead = ranks_lead(rs);
    if (lead && c->overwrite) remove_run_files(c->out);
    if (lead) {
        int64_t start_step = (int64_t)r->pos.epoch * r->loaders.steps_per_epoch + r->pos.step_in_epoch;
        r->log = runlog_open(c->out, c->resume[0] ? start_step : -1);
        runlog_write_config(r->log, r, argc, argv);
    }
    if (c->dump_batches[0]) {
        ct_mkdir_p(c->dump_batches);
        char p[1100];
        snprintf(p, sizeof p, "%s/init.safetensors", c->dump_batches);
        // Replays read the network's blurs from "blurpool", like every model file's.
        const char *bk[] = {"blurpool"}, *bv[] = {r->model.net->blurpool ? "1" : "0"};
        if (lead) st_save_resnet(p, r->model.net, NULL, 0, bk, bv, 1);
        for (int k = 0; k < rs->local; k++)
            rs->runs[k].faults.dump_train = dump_open(c->dump_batches, "train_batches", rs->runs[k].rank.rank, rs->world);
    }
    loop_install_signals();
    if (lead) {
        runlog_banner(r);
        dryrun_lr_note(c, &job->given, c->batch * rs->world, stderr);
        // Two checkpoints (last and best) must fit beside what is there, or a run of hours dies
        // at its first save.
        int64_t ck = dryrun_checkpoint_bytes(c->arch, r->data->channels, r->data->classes, c->blurpool, c->momentum > 0,
                                             c->ema > 0);
        int64_t fr = dryrun_free_bytes(c->out);
        if (ck > 0 && fr >= 0 && fr < 2 * ck)
            ct_warn("%s: %.1f MB free, but a checkpoint of this model takes %.1f MB and a run keeps two (last.ckpt, "
                    "best.ckpt): free some space or choose another --out", c->out, (double)fr / (1 << 20),
                    (double)ck / (1 << 20));
    }

    EvalResult last_eval;
    int rc = ranks_run(rs, 0, &last_eval);
    if (rc || !lead) {
        runlog_close(r->log);
        r->log = NULL;
        return rc;
    }
    // The final model, for torchvision (load_state_dict) and --evaluate --weights.
    char mp[1100];
    state_save_model(r, mp, sizeof mp);
    double total = ct_now() - job->t_start;
    char ts[32];
    runlog_fmt_duration(ts, sizeof ts, total);
    fprintf(stderr, "train: done in %s (%.1fs): val top-1 %.2f%% top-5 %.2f%% (best %.2f%% at epoch %d); model %s\n", ts,
            total, last_eval.top1, last_eval.top5, r->pos.best_top1, r->pos.best_epoch, mp);
    // Its tensors have torchvision's names and load into torchvision's model without an error,
    // but that model has no blurs: it would compute something else.
    if (r->model.net->blurpool)
        fprintf(stderr, "train: note: %s is a --blurpool network, not a plain torchvision %s: load_state_dict into "
                        "torchvision's model succeeds (the blurs have no tensors) but gives other outputs unless "
                        "FFCV's BlurPoolConv2d wraps every strided conv with >= 16 input channels first (its metadata "
                        "says blurpool=1; train export --onnx writes the blurs into the graph)\n", mp, r->model.net->arch);
    if (ema_on(r))
        fprintf(stderr, "train: --ema %g: the average's last val top-1 %.2f%% (plain %.2f%%); %s holds the %s weights%s\n",
                c->ema, r->model.ema.last_top1, r->model.ema.last_top1_plain, mp, ema_model_is_best(r) ? "EMA" : "plain",
                r->pos.best_is_ema ? "; best.ckpt's best top-1 is the EMA's" : "");
    if (c->demo)
        printf("demo: Fashion-MNIST test top-1 %.2f%% in %s (%.1fs) on %d CPU threads\n", last_eval.top1, ts, total,
               omp_get_max_threads());
    runlog_close(r->log);
    r->log = NULL;
    return 0;
}
