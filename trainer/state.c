// Checkpoints and the final model file (trainer/state.h).
#include "trainer/filekind.h"
#include "trainer/state.h"

#include <string.h>

#include "nn/checkpoint.h"
#include "nn/ema.h"
#include "nn/safetensors.h"
#include "trainer/run.h"
#include "trainer/settings.h"
#include "util/common.h"
#include "util/json_write.h"

// The host structs hold the state the files need (the GPU's live copy comes down first).
static void state_to_host(Run *r) {
    backend_download(r->model.backend, r->model.opt.n ? &r->model.opt : NULL);  // and the EMA's
}

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
    meta.epoch_bad = p->epoch_bad;
    meta.optimizer = (uint32_t)r->model.optim.kind;
    meta.frozen = (uint32_t)m->freeze_backbone;
    meta.blurpool = (uint32_t)m->blurpool;
    const RunEma *ema = &r->model.ema;
    meta.ema_decay = ema_on(r) ? r->cfg->ema : 0;  // as given (the float in use is its rounding)
    meta.ema_every = (uint32_t)ema->every;
    meta.best_is_ema = (uint32_t)p->best_is_ema;
    // The resolved settings, so `train --resume RUN_DIR` needs nothing else (trainer/settings.h).
    json_t *settings = settings_json(r->cfg);
    char *settings_text = ct_json_dumps_flags(settings, JSON_COMPACT);
    json_decref(settings);
    meta.settings = settings_text;
    // The optimizer's state by name (SGD and LARS without momentum keep none worth saving).
    const OptDesc *od = optim_desc(r->model.optim.kind);
    CkptOptim opt;
    memset(&opt, 0, sizeof opt);
    snprintf(opt.optimizer, sizeof opt.optimizer, "%s", od->name);
    opt.n = optim_saved_state(&r->model.optim);
    for (int i = 0; i < opt.n; i++) {
        snprintf(opt.t[i].name, sizeof opt.t[i].name, "%s", od->state[i]);
        opt.t[i].ndim = 1;
        opt.t[i].shape[0] = m->n_params;
        opt.t[i].data = r->model.opt.state[i];
    }
    checkpoint_write(path, &meta, m->params, m->bufs, m->counts, ema_on(r) ? ema->state : NULL,
                     ema_on(r) ? ema->state + m->n_params : NULL, &opt);
    free(settings_text);
}

// --resume and --ema: the checkpoint's average continues; one without an average starts a new one
// from its weights; an average the run does not ask for is dropped. Each says so.
static void resume_ema(Run *r, const Checkpoint *ck, const char *path) {
    const Config *c = r->cfg;
    const CheckpointMeta *m = &ck->meta;
    char note[1400];
    if (!(c->ema > 0)) {
        if (m->has_ema && r->rank.rank == 0)
            fprintf(stderr, "train: --resume %s: the checkpoint holds an EMA of the weights (decay %g); this run has no "
                            "--ema, so it is dropped\n", path, m->ema_decay);
        return;
    }
    if (!m->has_ema) {
        snprintf(note, sizeof note, "--resume %s: the checkpoint has no EMA of the weights; --ema %g starts one from its "
                                    "weights at step %lld", path, c->ema, (long long)m->global_step);
        ema_start(r, NULL, NULL, note);
        return;
    }
    note[0] = 0;
    if ((float)m->ema_decay != (float)c->ema || (int)m->ema_every != c->ema_every)
        snprintf(note, sizeof note, "--resume %s: the checkpoint's EMA was made with --ema %g --ema-every %u; it continues "
                                    "with --ema %g --ema-every %d", path, m->ema_decay, m->ema_every, c->ema, c->ema_every);
    ema_start(r, ck->ema_params, ck->ema_buffers, note[0] ? note : NULL);
}

// --resume: the optimizer's state tensors by name. Another optimizer's state would be meaningless
// here (SGD's buffer is a velocity, LARS's a scaled step, Adam's two moments), so continuing with
// another optimizer is refused once it has taken a step; a tensor this optimizer needs and the file
// lacks likewise (SGD's or LARS's buffer of a run without momentum).
static void resume_optimizer(Run *r, const Checkpoint *ck, const char *flag, const char *path) {
    const OptConfig *oc = &r->model.optim;
    const OptDesc *d = optim_desc(oc->kind);
    const char *theirs = ck->opt.optimizer;
    if (ck->meta.opt_steps > 0 && strcmp(theirs, d->name))
        ct_die("%s %s: the checkpoint's optimizer state was written by --optimizer %s, this run uses --optimizer %s; "
               "resume with --optimizer %s, or start a new run from its weights (--weights %s)", flag, path, theirs,
               d->name, theirs, path);
    for (int i = 0; i < optim_saved_state(oc); i++) {
        const CkptTensor *t = checkpoint_opt_tensor(ck, d->state[i]);
        if (t) memcpy(r->model.opt.state[i], t->data, ck->meta.n_params * sizeof(float));
        else if (ck->meta.opt_steps > 0)
            ct_die("%s %s: the checkpoint has no %s state tensor '%s' (it holds %d optimizer tensors%s), but this run "
                   "needs it%s; resume with the checkpoint's settings, or start a new run from its weights (--weights %s)",
                   flag, path, d->name, d->state[i], ck->opt.n, ck->opt.n ? "" : ": written without momentum",
                   d->state_needs_momentum ? " (--momentum > 0)" : "", path);
    }
    r->model.opt.steps = ck->meta.opt_steps;
}

void state_load_checkpoint(Run *r, const char *flag, const char *path, int restore_position) {
    ResNet *net = r->model.net;
    Checkpoint ck;
    const char *err = checkpoint_load(path, &ck);
    if (err) ct_die("%s %s: %s", flag, path, err);
    const CheckpointMeta *m = &ck.meta;
    if (strcmp(m->arch, net->arch))
        ct_die("%s %s: checkpoint is a %s, this run is a %s (--arch)", flag, path, m->arch, net->arch);
    // BlurPool shapes the network but adds no tensors, so the sizes below cannot tell: job_create
    // took the checkpoint's setting unless --blurpool/--no-blurpool was given. A resumed run must
    // stay the network it was; new weights may start another (said, not refused).
    if ((int)m->blurpool != net->blurpool) {
        if (restore_position)
            ct_die("%s %s: the checkpoint was trained %s --blurpool and this run is %s it; leave --blurpool/--no-blurpool "
                   "out to take the checkpoint's, or start a new run from its weights (--weights %s)", flag, path,
                   m->blurpool ? "with" : "without", net->blurpool ? "with" : "without", path);
        if (r->rank.rank == 0)
            fprintf(stderr, "train: %s %s: the checkpoint was trained %s --blurpool; this run %s it, as asked\n", flag, path,
                    m->blurpool ? "with" : "without", net->blurpool ? "adds" : "drops");
    }
    if ((int)m->in_channels != r->data->channels)
        ct_die("%s %s: checkpoint has %u input channels, the shards have %d", flag, path, m->in_channels, r->data->channels);
    if ((int)m->num_classes != r->data->classes)
        ct_die("%s %s: checkpoint has %u classes, the shards have %d", flag, path, m->num_classes, r->data->classes);
    if (m->class_hash != r->data->class_hash)
        ct_die("%s %s: class table differs from the shards' (hash %016llx vs %016llx): trained on another dataset",
               flag, path, (unsigned long long)m->class_hash, (unsigned long long)r->data->class_hash);
    // Files written before the parameter padding (nn/resnet.h) hold the tensors back to back: the
    // real count instead of the padded one. Their arrays move to the padded layout here.
    int packed = m->n_params != net->n_params && m->n_params == resnet_param_count(net);
    // The optimizer's tensors are shaped like the flat parameters (checked before they are used).
    for (int i = 0; i < ck.opt.n; i++)
        if (ck.opt.t[i].ndim != 1 || ck.opt.t[i].shape[0] != m->n_params)
            ct_die("%s %s: the optimizer's state tensor %s has %llu elements, its parameters %llu; not a checkpoint "
                   "this build can continue", flag, path, ck.opt.t[i].name, (unsigned long long)ck.opt.t[i].shape[0],
                   (unsigned long long)m->n_params);
    if (packed) {
        float **arrays[2 + CKPT_MAX_OPT_TENSORS] = {&ck.params, &ck.ema_params};
        for (int i = 0; i < ck.opt.n; i++) arrays[2 + i] = &ck.opt.t[i].data;
        for (int i = 0; i < 2 + ck.opt.n; i++) {
            if (!*arrays[i]) continue;
            float *a = ct_alloc(net->n_params * sizeof(float));
            resnet_params_unpack(net, a, *arrays[i]);
            if (*arrays[i] == ck.momentum) ck.momentum = a;
            free(*arrays[i]);
            *arrays[i] = a;
        }
        for (int i = 0; i < ck.opt.n; i++) ck.opt.t[i].shape[0] = net->n_params;
        ck.meta.n_params = net->n_params;
    }
    if (m->n_params != net->n_params || m->n_buffers != net->n_bufs || m->n_counts != net->n_counts)
        ct_die("%s %s: tensor sizes differ from a %s (%llu/%llu/%llu vs %zu/%zu/%zu)", flag, path, net->arch,
               (unsigned long long)m->n_params, (unsigned long long)m->n_buffers, (unsigned long long)m->n_counts,
               net->n_params, net->n_bufs, net->n_counts);
    // The gaps hold zero whatever the file says (a hand-made file could break that).
    float *flat[2 + CKPT_MAX_OPT_TENSORS] = {ck.params, ck.ema_params};
    for (int i = 0; i < ck.opt.n; i++) flat[2 + i] = ck.opt.t[i].data;
    for (int i = 0; i < 2 + ck.opt.n; i++)
        if (flat[i]) resnet_zero_padding(net, flat[i]);
    memcpy(net->params, ck.params, m->n_params * sizeof(float));
    memcpy(net->bufs, ck.buffers, m->n_buffers * sizeof(float));
    memcpy(net->counts, ck.counts, m->n_counts * sizeof(int64_t));
    if (restore_position) {
        const Config *c = r->cfg;
        resume_optimizer(r, &ck, flag, path);
        // A linear probe's run and a full fine-tune differ in what trains and how BN behaves;
        // switching halfway would make the resumed run neither, so say how to get either.
        if ((int)m->frozen != net->freeze_backbone)
            ct_die("%s %s: the checkpoint was trained %s --freeze-backbone and this run is %s it; resume %s "
                   "--freeze-backbone, or start a new run from its weights (--weights %s%s)", flag, path,
                   m->frozen ? "with" : "without", net->freeze_backbone ? "with" : "without",
                   m->frozen ? "with" : "without", path, m->frozen ? ", without --freeze-backbone" : "");
        Position *p = &r->pos;
        if ((uint64_t)c->seed != m->seed)
            ct_warn("--resume %s: checkpoint was trained with --seed %llu, continuing with --seed %lld", path,
                    (unsigned long long)m->seed, c->seed);
        p->epoch = (int)m->epoch;
        p->step_in_epoch = m->step_in_epoch;
        p->best_top1 = m->best_top1;
        p->best_epoch = m->best_epoch;
        p->best_is_ema = (int)m->best_is_ema;
        p->nonfinite_total = m->nonfinite_total;
        p->epoch_loss_sum = m->epoch_loss_sum;
        p->epoch_correct = m->epoch_correct;
        p->epoch_seen = m->epoch_seen;
        p->epoch_bad = m->epoch_bad;
        if (p->step_in_epoch > r->loaders.steps_per_epoch)
            ct_die("--resume %s: checkpoint stands at step %lld of epoch %d but an epoch has %lld steps with --batch-size %d",
                   path, (long long)p->step_in_epoch, p->epoch + 1, (long long)r->loaders.steps_per_epoch, c->batch);
        resume_ema(r, &ck, path);
    } else if (ck.ema_params && r->rank.rank == 0) {
        fprintf(stderr, "train: %s %s: the checkpoint also holds an EMA of the weights; this takes its plain weights "
                        "(a run's model.safetensors holds the better of the two)\n", flag, path);
    }
    checkpoint_free(&ck);
}

int state_checkpoint_blurpool(const char *path, const char *flag) {
    Checkpoint peek;
    const char *err = checkpoint_load(path, &peek);
    if (err) ct_die("%s %s: %s", flag, path, err);
    int on = peek.meta.blurpool != 0;
    checkpoint_free(&peek);
    return on;
}

const char *state_checkpoint_arch(const char *path, const char *flag) {
    Checkpoint peek;
    const char *err = checkpoint_load(path, &peek);
    if (err) ct_die("%s %s: %s", flag, path, err);
    const char *arch = ct_strdup(peek.meta.arch);
    checkpoint_free(&peek);
    return arch;
}

int state_is_checkpoint(const char *path) { return checkpoint_is(path); }

static void fmt_shape(char *buf, size_t n, const int64_t *shape, int ndim) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

// The classifier's shapes in the file and in the model, for the --reset-head note and error.
static int head_differs(const StFile *f, const ResNet *net, const char *name, char *file_shape, char *model_shape, size_t n) {
    const StateEntry *e = &net->entries[resnet_find_entry(net, name)];
    fmt_shape(model_shape, n, e->shape, e->ndim);
    const StTensor *t = st_find(f, name);
    if (!t) { snprintf(file_shape, n, "(absent)"); return 1; }
    fmt_shape(file_shape, n, t->shape, t->ndim);
    return strcmp(file_shape, model_shape) != 0;
}

void state_load_weights(Run *r, const char *path, int reset_head) {
    ResNet *net = r->model.net;
    const int say = r->rank.rank == 0;
    if (checkpoint_is(path)) {
        if (reset_head)
            ct_die("--reset-head: --weights %s is a checkpoint; --reset-head takes a .safetensors file (a run's "
                   "model.safetensors, or torchvision's weights)", path);
        state_load_checkpoint(r, "--weights", path, 0);
        if (say)
            fprintf(stderr, "train: --weights %s is a ctrain checkpoint: loaded its weights and BN statistics, not its "
                            "optimizer state or position%s\n", path, r->cfg->evaluate ? "" : " (training starts at epoch 1; --resume continues it)");
        return;
    }
    StFile f;
    char *err = st_open(path, &f);
    if (err) {
        char note[1300];
        ct_die("--weights %s%s", err, filekind_note(path, "a safetensors file", note, sizeof note));
    }
    char fw[64], mw[64], fb[64], mb[64];
    int differs = head_differs(&f, net, "fc.weight", fw, mw, sizeof fw);
    differs |= head_differs(&f, net, "fc.bias", fb, mb, sizeof fb);
    if (differs && !reset_head)
        ct_die("--weights %s: its classifier fc.weight is %s, fc.bias %s, but %s on these shards (%d classes) needs %s "
               "and %s; to fine-tune, add --reset-head (the classifier starts fresh)", path, fw, fb, net->arch,
               r->data->classes, mw, mb);
    err = st_load_resnet_except(&f, net, NULL, reset_head ? "fc." : NULL);
    if (err) ct_die("--weights %s: %s", path, err);
    st_close(&f);
    if (reset_head && say)
        fprintf(stderr, "train: --reset-head: the classifier starts fresh (seed %lld): fc.weight %s -> %s, fc.bias %s -> %s\n",
                r->cfg->seed, fw, mw, fb, mb);
}

static void save_model_file(Run *r, const char *name, int use_ema, char *path, size_t path_len);

void state_save_model(Run *r, char *path, size_t path_len) {
    save_model_file(r, "model.safetensors", ema_model_is_best(r), path, path_len);
}

void state_save_best_model(Run *r) {
    char path[1100];
    save_model_file(r, "best.safetensors", ema_on(r) && r->pos.best_is_ema, path, sizeof path);
}

// OUT/name with the plain weights or (use_ema) the average's, and the metadata predict, export and
// --evaluate read.
static void save_model_file(Run *r, const char *name, int use_ema, char *path, size_t path_len) {
    runlog_path(r->log, path, path_len, name);
    state_to_host(r);
    const Dataset *d = r->data;
    char ncls[16], nch[16], crop[16], resize[16];
    snprintf(ncls, sizeof ncls, "%d", d->classes);
    snprintf(nch, sizeof nch, "%d", d->channels);
    snprintf(crop, sizeof crop, "%d", r->cfg->val_crop_size);  // eval's preprocessing, not the last training size
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
    // "weights": which weights the file holds: "ema" (--ema's average, when its last val top-1 is at
    // least the plain weights') or "plain"; num_batches_tracked is the plain model's either way.
    char decay[32];
    snprintf(decay, sizeof decay, "%.9g", r->cfg->ema);
    // "blurpool": "1" when the network has BlurPool's blurs (predict, export and --weights take it).
    const char *keys[] = {"arch", "num_classes", "in_channels", "mean", "std", "crop_size", "val_resize", "classes",
                          "blurpool", "weights", "ema_decay"};
    const char *vals[] = {r->model.net->arch, ncls, nch, mean, std, crop, resize, classes,
                          r->model.net->blurpool ? "1" : "0", use_ema ? "ema" : "plain", decay};
    ResNet *net = r->model.net;
    float *avg = r->model.ema.state;  // host copies; swapped back below
    if (use_ema) ema_apply(EMA_SWAP, 0, net->params, net->n_params, net->bufs, net->n_bufs, avg);
    st_save_resnet(path, net, NULL, 0, keys, vals, ema_on(r) ? 11 : 10);
    if (use_ema) ema_apply(EMA_SWAP, 0, net->params, net->n_params, net->bufs, net->n_bufs, avg);
    free(classes);
}
