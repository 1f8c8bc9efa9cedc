#include "nn/checkpoint.h"

#include <string.h>

#include "util/common.h"
#include "util/crc32c.h"

#define CKPT_MAGIC "CTRNCKPT"
#define CKPT_VERSION 1u
#define CKPT_VERSION_EMA 2u  // version 1 plus the EMA tensors
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
    if (version != CKPT_VERSION && version != CKPT_VERSION_EMA) { err = "unsupported checkpoint version (written by a newer ctrain?)"; goto done; }
    if (meta_bytes != CKPT_META_BYTES) { err = "corrupt checkpoint header (meta size)"; goto done; }
    decode_meta(data + 16, &out->meta, &has_momentum, &sb);
    if (has_momentum > 1) { err = "corrupt checkpoint header (momentum flag)"; goto done; }
    uint32_t has_ema = out->meta.has_ema;
    if (has_ema != (version == CKPT_VERSION_EMA)) { err = "corrupt checkpoint header (EMA flag)"; goto done; }
    // Sizes against the file size before any multiplication can overflow.
    uint64_t np = out->meta.n_params, nb = out->meta.n_buffers, nc = out->meta.n_counts;
    if (np > size / 4 || nb > size / 4 || nc > size / 8) { err = "checkpoint truncated (tensor sizes exceed the file)"; goto done; }
    if (sb > size) { err = "checkpoint truncated (settings exceed the file)"; goto done; }
    uint64_t need = CKPT_PREFIX + (uint64_t)sb + 4 * (np * (1 + has_momentum + has_ema) + nb * (1 + has_ema)) + 8 * nc + 4;
    if (need != size) { err = size < need ? "checkpoint truncated" : "checkpoint has trailing bytes"; goto done; }
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
    if (has_momentum) {
        out->momentum = (float *)ct_alloc(np * 4);
        memcpy(out->momentum, p, np * 4);
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
    }
done:
    free(data);
    if (err) checkpoint_free(out);
    return err;
}

void checkpoint_free(Checkpoint *c) {
    free(c->params);
    free(c->momentum);
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
    if (version != CKPT_VERSION && version != CKPT_VERSION_EMA) { err = "unsupported checkpoint version (written by a newer ctrain?)"; goto done; }
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
