// Checkpoints and the final model file (trainer/state.h).
#include "trainer/state.h"

#include <string.h>

#include "nn/checkpoint.h"
#include "nn/safetensors.h"
#include "trainer/run.h"
#include "util/common.h"
#include "util/json_write.h"

// The host structs hold the state the files need (the GPU's live copy comes down first).
static void state_to_host(Run *r) { backend_download(r->model.backend, r->model.opt.buf ? &r->model.opt : NULL); }

void state_save_checkpoint(Run *r, const char *name, int64_t global_step) {
    state_to_host(r);
    const ResNet *m = r->model.net;
    const Position *p = &r->pos;
    char path[1100];
    runlog_path(r->log, path, sizeof path, name);
    CheckpointMeta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.arch, sizeof meta.arch, "%s", m->arch);
    meta.num_classes = (uint32_t)r->data->classes;
    meta.in_channels = (uint32_t)r->data->channels;
    meta.class_hash = r->data->class_hash;
    meta.epoch = (uint32_t)p->epoch;
    meta.global_step = global_step;
    meta.step_in_epoch = p->step_in_epoch;
    meta.seed = (uint64_t)r->cfg->seed;
    meta.best_top1 = p->best_top1;
    meta.best_epoch = p->best_epoch;
    meta.nonfinite_total = p->nonfinite_total;
    meta.n_params = m->n_params;
    meta.n_buffers = m->n_bufs;
    meta.n_counts = m->n_counts;
    meta.opt_steps = r->model.opt.steps;
    meta.epoch_loss_sum = p->epoch_loss_sum;
    meta.epoch_correct = p->epoch_correct;
    meta.epoch_seen = p->epoch_seen;
    checkpoint_save(path, &meta, m->params, r->cfg->momentum > 0 ? r->model.opt.buf : NULL, m->bufs, m->counts);
}

void state_load_checkpoint(Run *r, const char *path, int restore_position) {
    ResNet *net = r->model.net;
    Checkpoint ck;
    const char *err = checkpoint_load(path, &ck);
    if (err) ct_die("--resume %s: %s", path, err);
    const CheckpointMeta *m = &ck.meta;
    if (strcmp(m->arch, net->arch))
        ct_die("--resume %s: checkpoint is a %s, this run is a %s (--arch)", path, m->arch, net->arch);
    if ((int)m->in_channels != r->data->channels)
        ct_die("--resume %s: checkpoint has %u input channels, the shards have %d", path, m->in_channels, r->data->channels);
    if ((int)m->num_classes != r->data->classes)
        ct_die("--resume %s: checkpoint has %u classes, the shards have %d", path, m->num_classes, r->data->classes);
    if (m->class_hash != r->data->class_hash)
        ct_die("--resume %s: class table differs from the shards' (hash %016llx vs %016llx): trained on another dataset",
               path, (unsigned long long)m->class_hash, (unsigned long long)r->data->class_hash);
    if (m->n_params != net->n_params || m->n_buffers != net->n_bufs || m->n_counts != net->n_counts)
        ct_die("--resume %s: tensor sizes differ from a %s (%llu/%llu/%llu vs %zu/%zu/%zu)", path, net->arch,
               (unsigned long long)m->n_params, (unsigned long long)m->n_buffers, (unsigned long long)m->n_counts,
               net->n_params, net->n_bufs, net->n_counts);
    memcpy(net->params, ck.params, m->n_params * sizeof(float));
    memcpy(net->bufs, ck.buffers, m->n_buffers * sizeof(float));
    memcpy(net->counts, ck.counts, m->n_counts * sizeof(int64_t));
    if (restore_position) {
        const Config *c = r->cfg;
        Position *p = &r->pos;
        if (ck.momentum) memcpy(r->model.opt.buf, ck.momentum, m->n_params * sizeof(float));
        else if (c->momentum > 0 && m->opt_steps > 0)
            ct_die("--resume %s: checkpoint has no momentum buffer but --momentum is %g", path, c->momentum);
        r->model.opt.steps = m->opt_steps;
        if ((uint64_t)c->seed != m->seed)
            ct_warn("--resume %s: checkpoint was trained with --seed %llu, continuing with --seed %lld", path,
                    (unsigned long long)m->seed, c->seed);
        p->epoch = (int)m->epoch;
        p->step_in_epoch = m->step_in_epoch;
        p->best_top1 = m->best_top1;
        p->best_epoch = m->best_epoch;
        p->nonfinite_total = m->nonfinite_total;
        p->epoch_loss_sum = m->epoch_loss_sum;
        p->epoch_correct = m->epoch_correct;
        p->epoch_seen = m->epoch_seen;
        if (p->step_in_epoch > r->loaders.steps_per_epoch)
            ct_die("--resume %s: checkpoint stands at step %lld of epoch %d but an epoch has %lld steps with --batch-size %d",
                   path, (long long)p->step_in_epoch, p->epoch + 1, (long long)r->loaders.steps_per_epoch, c->batch);
    }
    checkpoint_free(&ck);
}

const char *state_checkpoint_arch(const char *path) {
    Checkpoint peek;
    const char *err = checkpoint_load(path, &peek);
    if (err) ct_die("--resume %s: %s", path, err);
    const char *arch = ct_strdup(peek.meta.arch);
    checkpoint_free(&peek);
    return arch;
}

void state_save_model(Run *r, char *path, size_t path_len) {
    runlog_path(r->log, path, path_len, "model.safetensors");
    state_to_host(r);
    const Dataset *d = r->data;
    char ncls[16], nch[16], crop[16], resize[16];
    snprintf(ncls, sizeof ncls, "%d", d->classes);
    snprintf(nch, sizeof nch, "%d", d->channels);
    snprintf(crop, sizeof crop, "%d", r->cfg->crop_size);
    snprintf(resize, sizeof resize, "%d", r->cfg->val_resize);
    // What predict and export need to use the model without the run: its eval preprocessing
    // (mean/std as comma-separated shortest floats) and the class table as a JSON array.
    char mean[64 * CT_JSON_REAL_MAX] = "", std[64 * CT_JSON_REAL_MAX] = "";
    for (int i = 0; i < d->channels && i < 64; i++) {
        char t[CT_JSON_REAL_MAX];
        ct_json_real_text(ct_json_float(d->mean[i]), t);
        snprintf(mean + strlen(mean), sizeof mean - strlen(mean), "%s%s", i ? "," : "", t);
        ct_json_real_text(ct_json_float(d->std[i]), t);
        snprintf(std + strlen(std), sizeof std - strlen(std), "%s%s", i ? "," : "", t);
    }
    json_t *names = json_array();
    for (uint32_t i = 0; i < d->val.n_classes; i++) json_array_append_new(names, json_string(d->val.class_names[i]));
    char *classes = ct_json_dumps_flags(names, JSON_COMPACT);
    json_decref(names);
    const char *keys[] = {"arch", "num_classes", "in_channels", "mean", "std", "crop_size", "val_resize", "classes"};
    const char *vals[] = {r->model.net->arch, ncls, nch, mean, std, crop, resize, classes};
    st_save_resnet(path, r->model.net, NULL, 0, keys, vals, 8);
    free(classes);
}
