// A train process from its settings to its exit status (trainer/job.h).
#include "trainer/job.h"

#include <omp.h>
#include <string.h>
#include <time.h>

#include "nn/safetensors.h"
#include "trainer/loop.h"
#include "util/common.h"

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
    if (cfg->demo) demo_prepare();
    dataset_open(&job->data, cfg);
    // An explicit --arch must match a checkpoint being resumed; without one, the checkpoint's is used.
    if (cfg->resume[0] && !config_given(given, "arch") && !cfg->demo) cfg->arch = state_checkpoint_arch(cfg->resume);
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

// runs/DATE-ARCH unless --out names one.
static void choose_out_dir(Config *c) {
    if (c->out[0]) return;
    char buf[256], when[64];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y%m%d-%H%M%S", localtime(&now));
    snprintf(buf, sizeof buf, "runs/%s-%s", when, c->arch);
    c->out = ct_strdup(buf);
}

int job_train(Job *job, int argc, char **argv) {
    Config *c = &job->cfg;
    Ranks *rs = &job->ranks;
    Run *r = &rs->runs[0];
    const int lead = ranks_lead(rs);
    choose_out_dir(c);
    if (lead) {
        int64_t start_step = (int64_t)r->pos.epoch * r->loaders.steps_per_epoch + r->pos.step_in_epoch;
        r->log = runlog_open(c->out, c->resume[0] ? start_step : -1);
        runlog_write_config(r->log, r, argc, argv);
    }
    if (c->dump_batches[0]) {
        ct_mkdir_p(c->dump_batches);
        char p[1100];
        snprintf(p, sizeof p, "%s/init.safetensors", c->dump_batches);
        if (lead) st_save_resnet(p, r->model.net, NULL, 0, NULL, NULL, 0);
        for (int k = 0; k < rs->local; k++)
            rs->runs[k].faults.dump_train = dump_open(c->dump_batches, "train_batches", rs->runs[k].rank.rank, rs->world);
    }
    loop_install_signals();
    if (lead) runlog_banner(r);

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
    if (c->demo)
        printf("demo: Fashion-MNIST test top-1 %.2f%% in %s (%.1fs) on %d CPU threads\n", last_eval.top1, ts, total,
               omp_get_max_threads());
    runlog_close(r->log);
    r->log = NULL;
    return 0;
}
