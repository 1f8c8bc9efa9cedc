// Setting up one rank's run (trainer/run.h).
#include "trainer/run.h"

#include <libgen.h>
#include <stdlib.h>
#include <string.h>

#include "nn/safetensors.h"
#include "trainer/settings.h"
#include "util/common.h"

static ResNet *create_model(const Config *c, const Dataset *d) {
    ResNet *m = resnet_create_dp(c->arch, d->channels, d->classes, c->blurpool, c->drop_path);
    if (!m) ct_die("--arch: unknown architecture '%s'", c->arch);
    resnet_init(m, (uint64_t)c->seed, c->zero_init_residual);
    TensorDim *dims = ct_alloc(sizeof(TensorDim) * m->n_tensors);
    // Every size the model will see: the training resolutions (the ramp's ends bound them) and eval's.
    const char *flag[] = {"--res-start", "--res-end", "--val-crop-size"};
    int px[] = {c->res_start, c->res_end, c->val_crop_size};
    for (int i = 0; i < 3; i++)
        if (resnet_shapes(m, px[i], px[i], dims) != 0)
            ct_die("%s %d: too small for %s (some layer would have no pixels left)",
                   px[i] == c->crop_size ? "--crop-size" : flag[i], px[i], c->arch);
    free(dims);
    return m;
}

static void setup_training(Run *r, BackendKind kind, int bf16) {
    const Config *c = r->cfg;
    RunModel *mo = &r->model;
    config_optimizer(c, &mo->optim);
    optim_init(&mo->opt, mo->optim.kind, mo->net->n_params);
    lr_kind_parse(c->lr_schedule, &mo->schedule.kind);
    mo->schedule.base_lr = c->lr;
    mo->schedule.epochs = c->epochs;
    mo->schedule.steps_per_epoch = r->loaders.steps_per_epoch;
    mo->schedule.warmup_epochs = c->warmup_epochs;
    mo->schedule.step_size = c->lr_step_size;
    mo->schedule.gamma = c->lr_gamma;
    mo->schedule.power = c->lr_power;
    mo->schedule.end_lr = c->lr_end;
    mo->loss.smoothing = c->label_smoothing;
    mo->loss.kd_alpha = c->kd_alpha;
    mo->loss.kd_temperature = c->kd_temperature;
    mo->loss.bce = c->bce;
    mo->loss.bce_threshold = (float)c->bce_target_thresh;
    mo->loss.bce_sum = c->bce_sum;
    r->pos.best_top1 = -1;
    r->pos.best_epoch = 0;
    if (c->teacher[0]) {
        const char *colon = strchr(c->teacher, ':');
        char tarch[32];
        snprintf(tarch, sizeof tarch, "%.*s", (int)(colon - c->teacher), c->teacher);
        // A teacher trained with --blurpool says so in its metadata (its tensors cannot).
        StFile tf;
        char *err = st_open(colon + 1, &tf);
        if (err) ct_die("--teacher %s", err);
        const char *blur = st_meta(&tf, "blurpool");
        mo->teacher = resnet_create_ex(tarch, r->data->channels, r->data->classes, blur && !strcmp(blur, "1"));
        st_close(&tf);
        st_load_resnet(colon + 1, mo->teacher);
    }
    faults_init(&r->faults, r->rank.rank, r->rank.world, mo->net);
    if (c->resume[0]) state_load_checkpoint(r, "--resume", c->resume, 1);  // starts the EMA from the checkpoint
    else ema_start(r, NULL, NULL, NULL);
    backend_upload(mo->backend, &mo->opt);  // and the EMA's state tensor, attached by ema_start
    ExecOptions eo;
    config_exec_options(c, &eo);
    if (mo->teacher) mo->teacher_backend = backend_create(kind, mo->teacher, bf16, r->rank.local_rank, 0, &eo);
    if (r->pos.epoch >= c->epochs && r->pos.step_in_epoch == 0) {
        char cont[8192], *copy = ct_strdup(c->resume);
        settings_resume_command(c, dirname(copy), cont, sizeof cont);
        free(copy);
        ct_die("--resume %s: the checkpoint has finished epoch %d already; raise --epochs beyond %d to train on: %s "
               "--epochs %d", c->resume, r->pos.epoch, r->pos.epoch, cont, r->pos.epoch + 1);
    }
}

void run_setup(Run *r, const Config *c, const Dataset *d, BackendKind kind, int rank, int world, int local_rank,
               Comm *comm) {
    memset(r, 0, sizeof *r);
    r->cfg = c;
    r->data = d;
    r->rank = (RunRank){rank, world, local_rank, comm};
    r->faults.stall_rank = -1;
    int bf16 = !strcmp(c->precision, "bf16");
    r->model.net = create_model(c, d);
    r->model.net->freeze_backbone = c->freeze_backbone;
    if (c->weights[0]) state_load_weights(r, c->weights, c->reset_head);
    r->model.eval_dlogits = ct_alloc(sizeof(float) * (size_t)c->batch * d->classes);
    loaders_create(&r->loaders, d, c, kind, rank, world);
    ExecOptions eo;
    config_exec_options(c, &eo);
    r->model.backend = backend_create(kind, r->model.net, bf16, local_rank, !strcmp(c->cuda_graphs, "on"), &eo);
    if (c->evaluate) {
        if (c->resume[0]) state_load_checkpoint(r, "--resume", c->resume, 0);
        backend_upload(r->model.backend, NULL);
        return;
    }
    setup_training(r, kind, bf16);
}

void run_teardown(Run *r) {
    loaders_destroy(&r->loaders);
    backend_free(r->model.teacher_backend);
    backend_free(r->model.backend);
    if (r->model.teacher) resnet_free(r->model.teacher);
    resnet_free(r->model.net);
    optim_free(&r->model.opt);
    free(r->model.eval_dlogits);
    ema_free(&r->model.ema);
}
