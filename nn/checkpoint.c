#include "nn/checkpoint.h"

#include <string.h>

#include "nn/optim.h"
#include "util/common.h"
#include "util/crc32c.h"

#define CKPT_MAGIC "CTRNCKPT"
#define CKPT_VERSION 1u
#define CKPT_VERSION_EMA 2u  // version 1 plus the EMA tensors
#define CKPT_VERSION_NAMED 3u  // the optimizer's state as a section of named tensors
#define CKPT_OPT_HEAD 20u      // optimizer[16] + n_tensors
#define CKPT_OPT_DESC 72u      // name[32] + dtype[4] + ndim + shape[4]
#define CKPT_META_BYTES 192u
#define CKPT_META_BLURPOOL 180u  // offset of blurpool in meta: right after best_is_ema
#define CKPT_META_SETTINGS 184u  // offset of settings_bytes in meta: right after blurpool
#define CKPT_PREFIX (8u + 4u + 4u + CKPT_META_BYTES)

// Fixed little-endian encoding of the meta block (the hosts we target are little-endian; memcpy of
// each field keeps the layout independent of struct padding).
static void put(uint8_t **p, const void *v, size_t n) { memcpy(*p, v, n); *p += n; }
static void get(const uint8_t **p, void *v, size_t n) { memcpy(v, *p, n); *p += n; }

static void encode_meta(uint8_t *buf, const CheckpointMeta *m, uint32_t has_momentum, uint32_t has_ema,
                        uint32_t settings_bytes) {
    memset(buf, 0, CKPT_META_BYTES);
    uint8_t *p = buf;
    put(&p, m->arch, 32);
    put(&p, &m->num_classes, 4);
    put(&p, &m->in_channels, 4);
    put(&p, &m->class_hash, 8);
    put(&p, &m->epoch, 4);
    put(&p, &has_momentum, 4);
    put(&p, &m->global_step, 8);
    put(&p, &m->step_in_epoch, 8);
    put(&p, &m->seed, 8);
    put(&p, &m->best_top1, 8);
    put(&p, &m->best_epoch, 4);
    put(&p, &m->nonfinite_total, 4);
    put(&p, &m->n_params, 8);
    put(&p, &m->n_buffers, 8);
    put(&p, &m->n_counts, 8);
    put(&p, &m->opt_steps, 8);
    put(&p, &m->epoch_loss_sum, 8);
    put(&p, &m->epoch_correct, 8);
    put(&p, &m->epoch_seen, 8);
    put(&p, &m->optimizer, 4);
    put(&p, &m->frozen, 4);
    if (has_ema) {  // version 1: zero where these would be
        uint32_t every = m->ema_every, best_ema = m->best_is_ema;
        put(&p, &has_ema, 4);
        put(&p, &every, 4);
        put(&p, &m->ema_decay, 8);
        put(&p, &best_ema, 4);
    }
    p = buf + CKPT_META_BLURPOOL;
    put(&p, &m->blurpool, 4);
    put(&p, &settings_bytes, 4);
    put(&p, &m->epoch_bad, 4);
}

static void decode_meta(const uint8_t *buf, CheckpointMeta *m, uint32_t *has_momentum, uint32_t *settings_bytes) {
    const uint8_t *p = buf;
    memset(m, 0, sizeof *m);
    get(&p, m->arch, 32);
    m->arch[31] = 0;
    get(&p, &m->num_classes, 4);
    get(&p, &m->in_channels, 4);
    get(&p, &m->class_hash, 8);
    get(&p, &m->epoch, 4);
    get(&p, has_momentum, 4);
    get(&p, &m->global_step, 8);
    get(&p, &m->step_in_epoch, 8);
    get(&p, &m->seed, 8);
    get(&p, &m->best_top1, 8);
    get(&p, &m->best_epoch, 4);
    get(&p, &m->nonfinite_total, 4);
    get(&p, &m->n_params, 8);
    get(&p, &m->n_buffers, 8);
    get(&p, &m->n_counts, 8);
    get(&p, &m->opt_steps, 8);
    get(&p, &m->epoch_loss_sum, 8);
    get(&p, &m->epoch_correct, 8);
    get(&p, &m->epoch_seen, 8);
    get(&p, &m->optimizer, 4);  // 0 in files from before it was recorded: they were all SGD
    get(&p, &m->frozen, 4);     // 0 in older files: none froze
    get(&p, &m->has_ema, 4);
    get(&p, &m->ema_every, 4);
    get(&p, &m->ema_decay, 8);
    get(&p, &m->best_is_ema, 4);
    p = buf + CKPT_META_BLURPOOL;
    get(&p, &m->blurpool, 4);  // 0 in older files: none had blurs
    get(&p, settings_bytes, 4);  // 0 in older files: no settings section
    get(&p, &m->epoch_bad, 4);   // 0 in older files: none skipped
}

void checkpoint_save(const char *path, const CheckpointMeta *meta, const float *params,
                     const float *momentum, const float *buffers, const int64_t *counts) {
    checkpoint_save_ema(path, meta, params, momentum, buffers, counts, NULL, NULL);
}

static uint64_t tensor_elems(const CkptTensor *t) {
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

void checkpoint_write(const char *path, const CheckpointMeta *meta, const float *params, const float *buffers,
                      const int64_t *counts, const float *ema_params, const float *ema_buffers, const CkptOptim *opt) {
    uint8_t head[CKPT_PREFIX];
    uint32_t has_ema = ema_params != NULL;
    uint32_t version = CKPT_VERSION_NAMED, meta_bytes = CKPT_META_BYTES;
    if (opt->n < 0 || opt->n > CKPT_MAX_OPT_TENSORS) ct_die("internal: %d optimizer tensors for %s", opt->n, path);
    memcpy(head, CKPT_MAGIC, 8);
    memcpy(head + 8, &version, 4);
    memcpy(head + 12, &meta_bytes, 4);
    size_t sb = meta->settings ? strlen(meta->settings) : 0;
    if (sb > (64u << 20)) ct_die("%s: settings of %zu bytes: too large for a checkpoint", path, sb);
    encode_meta(head + 16, meta, 0, has_ema, (uint32_t)sb);

    AtomicFile af = ct_atomic_open(path);
    uint32_t crc = crc32c(0, head, sizeof head);
    ct_atomic_write(&af, head, sizeof head);
#define W(p, n) (crc = crc32c(crc, (p), (n)), ct_atomic_write(&af, (p), (n)))
    if (sb) W(meta->settings, sb);
    size_t pb = meta->n_params * sizeof(float), bb = meta->n_buffers * sizeof(float);
    W(params, pb);
    W(buffers, bb);
    W(counts, meta->n_counts * sizeof(int64_t));
    if (has_ema) {
        W(ema_params, pb);
        W(ema_buffers, bb);
    }
    uint8_t sec[CKPT_OPT_HEAD + CKPT_MAX_OPT_TENSORS * CKPT_OPT_DESC];
    memset(sec, 0, sizeof sec);
    snprintf((char *)sec, 16, "%s", opt->optimizer);
    uint32_t nt = (uint32_t)opt->n;
    memcpy(sec + 16, &nt, 4);
    for (int i = 0; i < opt->n; i++) {
        uint8_t *d = sec + CKPT_OPT_HEAD + (size_t)i * CKPT_OPT_DESC;
        const CkptTensor *t = &opt->t[i];
        if (t->ndim < 1 || t->ndim > 4) ct_die("internal: optimizer tensor %s has %u dimensions", t->name, t->ndim);
        snprintf((char *)d, 32, "%s", t->name);
        memcpy(d + 32, "F32", 4);
        memcpy(d + 36, &t->ndim, 4);
        for (uint32_t k = 0; k < t->ndim; k++) memcpy(d + 40 + 8 * k, &t->shape[k], 8);
    }
    W(sec, CKPT_OPT_HEAD + (size_t)opt->n * CKPT_OPT_DESC);
    for (int i = 0; i < opt->n; i++) W(opt->t[i].data, tensor_elems(&opt->t[i]) * sizeof(float));
#undef W
    ct_atomic_write(&af, &crc, 4);
    ct_atomic_commit(&af);
}

void checkpoint_save_ema(const char *path, const CheckpointMeta *meta, const float *params, const float *momentum,
                         const float *buffers, const int64_t *counts, const float *ema_params,
                         const float *ema_buffers) {
    uint8_t head[CKPT_PREFIX];
    uint32_t has_ema = ema_params != NULL;
    uint32_t version = has_ema ? CKPT_VERSION_EMA : CKPT_VERSION, meta_bytes = CKPT_META_BYTES;
    memcpy(head, CKPT_MAGIC, 8);
    memcpy(head + 8, &version, 4);
    memcpy(head + 12, &meta_bytes, 4);
    size_t sb = meta->settings ? strlen(meta->settings) : 0;
    if (sb > (64u << 20)) ct_die("%s: settings of %zu bytes: too large for a checkpoint", path, sb);
    encode_meta(head + 16, meta, momentum != NULL, has_ema, (uint32_t)sb);

    AtomicFile af = ct_atomic_open(path);
    uint32_t crc = crc32c(0, head, sizeof head);
    ct_atomic_write(&af, head, sizeof head);
    if (sb) {
        crc = crc32c(crc, meta->settings, sb);
        ct_atomic_write(&af, meta->settings, sb);
    }
    size_t pb = meta->n_params * sizeof(float), bb = meta->n_buffers * sizeof(float);
    crc = crc32c(crc, params, pb);
    ct_atomic_write(&af, params, pb);
    if (momentum) {
        crc = crc32c(crc, momentum, pb);
        ct_atomic_write(&af, momentum, pb);
    }
    crc = crc32c(crc, buffers, bb);
    ct_atomic_write(&af, buffers, bb);
    size_t cb = meta->n_counts * sizeof(int64_t);
    crc = crc32c(crc, counts, cb);
    ct_atomic_write(&af, counts, cb);
    if (has_ema) {
        crc = crc32c(crc, ema_params, pb);
        ct_atomic_write(&af, ema_params, pb);
        crc = crc32c(crc, ema_buffers, bb);
        ct_atomic_write(&af, ema_buffers, bb);
    }
    ct_atomic_write(&af, &crc, 4);
    ct_atomic_commit(&af);
}

// Versions 1 and 2: the momentum becomes the one named tensor of the optimizer meta.optimizer says.
static void momentum_as_named(Checkpoint *c, float *momentum) {
    const OptDesc *d = optim_desc(c->meta.optimizer == CKPT_OPT_LARS ? OPT_LARS : OPT_SGD);
    snprintf(c->opt.optimizer, sizeof c->opt.optimizer, "%s", d->name);
    if (!momentum) return;
    CkptTensor *t = &c->opt.t[0];
    snprintf(t->name, sizeof t->name, "%s", d->state[0]);
    t->ndim = 1;
    t->shape[0] = c->meta.n_params;
    t->data = momentum;
    c->opt.n = 1;
    c->momentum = momentum;
}

// Version 3's section at p (avail bytes before the checksum); returns NULL or what is wrong.
static const char *read_section(Checkpoint *c, const uint8_t *p, uint64_t avail) {
    if (avail < CKPT_OPT_HEAD) return "checkpoint truncated (optimizer section)";
    CkptOptim *o = &c->opt;
    memcpy(o->optimizer, p, 16);
    if (!memchr(o->optimizer, 0, 16)) return "corrupt optimizer section (optimizer name)";
    uint32_t nt;
    memcpy(&nt, p + 16, 4);
    if (nt > CKPT_MAX_OPT_TENSORS) return "corrupt optimizer section (tensor count)";
    uint64_t at = CKPT_OPT_HEAD + (uint64_t)nt * CKPT_OPT_DESC;
    if (avail < at) return "checkpoint truncated (optimizer section)";
    for (uint32_t i = 0; i < nt; i++) {
        const uint8_t *d = p + CKPT_OPT_HEAD + (size_t)i * CKPT_OPT_DESC;
        CkptTensor *t = &o->t[i];
        memcpy(t->name, d, 32);
        if (!memchr(t->name, 0, 32) || !t->name[0]) return "corrupt optimizer section (tensor name)";
        if (memcmp(d + 32, "F32", 4)) return "corrupt optimizer section (a tensor's dtype is not F32)";
        memcpy(&t->ndim, d + 36, 4);
        if (t->ndim < 1 || t->ndim > 4) return "corrupt optimizer section (tensor rank)";
        uint64_t n = 1;
        for (uint32_t k = 0; k < t->ndim; k++) {
            memcpy(&t->shape[k], d + 40 + 8 * k, 8);
            if (t->shape[k] > avail / 4 || (t->shape[k] && n > avail / 4 / t->shape[k])) return "checkpoint truncated (optimizer tensor sizes exceed the file)";
            n *= t->shape[k];
        }
        for (uint32_t k = 0; k < i; k++)
            if (!strcmp(o->t[k].name, t->name)) return "corrupt optimizer section (a tensor name twice)";
        if (avail - at < 4 * n) return "checkpoint truncated (optimizer tensors)";
        t->data = (float *)ct_alloc(4 * n + 1);
        memcpy(t->data, p + at, 4 * n);
        at += 4 * n;
        o->n = (int)i + 1;
    }
    if (at != avail) return "checkpoint has trailing bytes";
    return NULL;
}

const char *checkpoint_load(const char *path, Checkpoint *out) {
    memset(out, 0, sizeof *out);
    if (!ct_file_exists(path)) return "no such file";
    size_t size = 0;
    uint8_t *data = (uint8_t *)ct_read_file(path, &size);
    const char *err = NULL;
    uint32_t version, meta_bytes, has_momentum = 0, sb = 0;
    if (size < CKPT_PREFIX + 4 || memcmp(data, CKPT_MAGIC, 8) != 0) { err = "not a ctrain checkpoint (bad magic or too short)"; goto done; }
    memcpy(&version, data + 8, 4);
    memcpy(&meta_bytes, data + 12, 4);
    if (version != CKPT_VERSION && version != CKPT_VERSION_EMA && version != CKPT_VERSION_NAMED) { err = "unsupported checkpoint version (written by a newer ctrain?)"; goto done; }
    if (meta_bytes != CKPT_META_BYTES) { err = "corrupt checkpoint header (meta size)"; goto done; }
    decode_meta(data + 16, &out->meta, &has_momentum, &sb);
    const int named = version == CKPT_VERSION_NAMED;
    if (has_momentum > 1 || (named && has_momentum)) { err = "corrupt checkpoint header (momentum flag)"; goto done; }
    uint32_t has_ema = out->meta.has_ema;
    if (named ? has_ema > 1 : has_ema != (version == CKPT_VERSION_EMA)) { err = "corrupt checkpoint header (EMA flag)"; goto done; }
    // Sizes against the file size before any multiplication can overflow.
    uint64_t np = out->meta.n_params, nb = out->meta.n_buffers, nc = out->meta.n_counts;
    if (np > size / 4 || nb > size / 4 || nc > size / 8) { err = "checkpoint truncated (tensor sizes exceed the file)"; goto done; }
    if (sb > size) { err = "checkpoint truncated (settings exceed the file)"; goto done; }
    uint64_t need = CKPT_PREFIX + (uint64_t)sb + 4 * (np * (1 + has_momentum + has_ema) + nb * (1 + has_ema)) + 8 * nc + 4;
    if (named ? need > size : need != size) { err = size < need ? "checkpoint truncated" : "checkpoint has trailing bytes"; goto done; }
    uint32_t crc_file;
    memcpy(&crc_file, data + size - 4, 4);
    if (crc32c(0, data, size - 4) != crc_file) { err = "checkpoint checksum mismatch (file corrupt)"; goto done; }
    const uint8_t *p = data + CKPT_PREFIX;
    if (sb) {
        out->settings = (char *)ct_alloc(sb + 1);
        memcpy(out->settings, p, sb);
        out->settings[sb] = 0;
        out->meta.settings = out->settings;
        p += sb;
    }
    out->params = (float *)ct_alloc(np * 4);
    memcpy(out->params, p, np * 4);
    p += np * 4;
    float *momentum = NULL;
    if (has_momentum) {
        momentum = (float *)ct_alloc(np * 4);
        memcpy(momentum, p, np * 4);
        p += np * 4;
    }
    out->buffers = (float *)ct_alloc(nb * 4);
    memcpy(out->buffers, p, nb * 4);
    p += nb * 4;
    out->counts = (int64_t *)ct_alloc(nc * 8);
    memcpy(out->counts, p, nc * 8);
    p += nc * 8;
    if (has_ema) {
        out->ema_params = (float *)ct_alloc(np * 4 + 1);
        memcpy(out->ema_params, p, np * 4);
        p += np * 4;
        out->ema_buffers = (float *)ct_alloc(nb * 4 + 1);
        memcpy(out->ema_buffers, p, nb * 4);
        p += nb * 4;
    }
    if (!named) {
        momentum_as_named(out, momentum);
    } else {
        err = read_section(out, p, (uint64_t)(data + size - 4 - p));
        if (err) goto done;
        // sgd's and lars's one buffer, for the callers that know only it
        const OptDesc *d = optim_find(out->opt.optimizer);
        if (d && d->n_state == 1 && d->state_needs_momentum) {
            const CkptTensor *t = checkpoint_opt_tensor(out, d->state[0]);
            if (t && t->ndim == 1 && t->shape[0] == np) out->momentum = t->data;
        }
    }
done:
    free(data);
    if (err) checkpoint_free(out);
    return err;
}

const CkptTensor *checkpoint_opt_tensor(const Checkpoint *c, const char *name) {
    for (int i = 0; i < c->opt.n; i++)
        if (!strcmp(c->opt.t[i].name, name)) return &c->opt.t[i];
    return NULL;
}

void checkpoint_free(Checkpoint *c) {
    free(c->params);
    for (int i = 0; i < c->opt.n; i++) free(c->opt.t[i].data);  // momentum is one of them
    memset(&c->opt, 0, sizeof c->opt);
    free(c->buffers);
    free(c->counts);
    free(c->ema_params);
    free(c->ema_buffers);
    free(c->settings);
    c->settings = NULL;
    c->meta.settings = NULL;
    c->params = c->momentum = c->buffers = c->ema_params = c->ema_buffers = NULL;
    c->counts = NULL;
}

const char *checkpoint_read_settings(const char *path, char **settings) {
    *settings = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return "cannot open";
    uint8_t head[CKPT_PREFIX];
    const char *err = NULL;
    uint32_t version, meta_bytes, has_momentum, sb = 0;
    CheckpointMeta m;
    if (fread(head, 1, sizeof head, f) != sizeof head || memcmp(head, CKPT_MAGIC, 8) != 0) {
        err = "not a ctrain checkpoint (bad magic or too short)";
        goto done;
    }
    memcpy(&version, head + 8, 4);
    memcpy(&meta_bytes, head + 12, 4);
    if (version != CKPT_VERSION && version != CKPT_VERSION_EMA && version != CKPT_VERSION_NAMED) { err = "unsupported checkpoint version (written by a newer ctrain?)"; goto done; }
    if (meta_bytes != CKPT_META_BYTES) { err = "corrupt checkpoint header (meta size)"; goto done; }
    decode_meta(head + 16, &m, &has_momentum, &sb);
    if (!sb) goto done;
    if (sb > (64u << 20)) { err = "corrupt checkpoint header (settings size)"; goto done; }
    *settings = (char *)ct_alloc(sb + 1);
    if (fread(*settings, 1, sb, f) != sb) {
        free(*settings);
        *settings = NULL;
        err = "checkpoint truncated";
        goto done;
    }
    (*settings)[sb] = 0;
done:
    fclose(f);
    return err;
}

int checkpoint_is(const char *path) {
    char head[8];
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    int is = fread(head, 1, 8, f) == 8 && memcmp(head, CKPT_MAGIC, 8) == 0;
    fclose(f);
    return is;
}
