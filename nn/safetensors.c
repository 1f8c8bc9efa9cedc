// Safetensors I/O and the torchvision state_dict mapping of a ResNet.
#include "nn/safetensors.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "nn/json.h"
#include "util/bf16.h"
#include "util/common.h"

static const struct {
    const char *name;
    size_t size;
} DTYPES[ST_NDTYPES] = {
    {"F32", 4}, {"F64", 8}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1}, {"U8", 1}, {"BOOL", 1},
};

const char *st_dtype_name(int dtype) { return dtype >= 0 && dtype < ST_NDTYPES ? DTYPES[dtype].name : "?"; }
size_t st_dtype_size(int dtype) { return dtype >= 0 && dtype < ST_NDTYPES ? DTYPES[dtype].size : 0; }

static char *errf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    return s ? s : ct_strdup("out of memory formatting an error");
}

static void shape_str(char *out, size_t cap, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++) n += (size_t)snprintf(out + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(out + n, cap - n, "]");
}

// ---------------------------------------------------------------------------------------------
// Reading.
static void file_free_tables(StFile *f) {
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_key[i]);
        free(f->meta_val[i]);
    }
    free(f->meta_key);
    free(f->meta_val);
}

static int cmp_begin(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    if (x->data != y->data) return x->data < y->data ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

char *st_parse(const uint8_t *buf, size_t size, StFile *f) {
    memset(f, 0, sizeof *f);
    if (size < 8) return errf("file is %zu bytes, shorter than the 8-byte header length", size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > size - 8)
        return errf("header length %llu (bytes 0-7) runs past the end of the %zu-byte file (truncated?)",
                    (unsigned long long)hlen, size);
    const char *htext = (const char *)buf + 8;
    JsonValue root;
    char *jerr = json_parse(htext, (size_t)hlen, &root);
    if (jerr) {
        // json errors carry offsets within the header; make them file offsets.
        size_t at = 0;
        const char *rest = jerr;
        if (sscanf(jerr, "byte %zu:", &at) == 1 && (rest = strchr(jerr, ':'))) rest += 2;
        char *e = errf("malformed JSON header at byte %zu: %s", at + 8, rest);
        free(jerr);
        return e;
    }
    char *err = NULL;
    if (root.type != JSON_OBJECT) {
        err = errf("header (byte 8) is not a JSON object");
        goto fail;
    }
    const uint8_t *data = buf + 8 + hlen;
    size_t data_size = size - 8 - (size_t)hlen;
    f->t = ct_zalloc((root.n + 1) * sizeof(StTensor));
    for (int i = 0; i < root.n; i++) {
        const char *key = root.keys[i];
        const JsonValue *v = &root.items[i];
        size_t at = v->pos + 8;
        if (strlen(key) != root.key_lens[i]) {
            err = errf("tensor name with a NUL character at byte %zu", at);
            goto fail;
        }
        if (strcmp(key, "__metadata__") == 0) {
            if (v->type != JSON_OBJECT) {
                err = errf("__metadata__ (byte %zu) is not an object", at);
                goto fail;
            }
            f->meta_key = ct_zalloc((v->n + 1) * sizeof(char *));
            f->meta_val = ct_zalloc((v->n + 1) * sizeof(char *));
            for (int k = 0; k < v->n; k++) {
                if (v->items[k].type != JSON_STRING) {
                    err = errf("__metadata__ value of \"%.100s\" (byte %zu) is not a string", v->keys[k], v->items[k].pos + 8);
                    goto fail;
                }
                f->meta_key[f->n_meta] = ct_strdup(v->keys[k]);
                f->meta_val[f->n_meta] = ct_strdup(v->items[k].str);
                f->n_meta++;
            }
            continue;
        }
        if (v->type != JSON_OBJECT) {
            err = errf("tensor '%.200s': entry at byte %zu is not an object", key, at);
            goto fail;
        }
        const JsonValue *dt = json_get(v, "dtype"), *sh = json_get(v, "shape"), *off = json_get(v, "data_offsets");
        if (!dt || !sh || !off) {
            err = errf("tensor '%.200s' (byte %zu): missing \"%s\"", key, at, !dt ? "dtype" : !sh ? "shape" : "data_offsets");
            goto fail;
        }
        StTensor *t = &f->t[f->n];
        t->dtype = -1;
        if (dt->type == JSON_STRING)
            for (int d = 0; d < ST_NDTYPES; d++)
                if (strcmp(dt->str, DTYPES[d].name) == 0) t->dtype = d;
        if (t->dtype < 0) {
            err = errf("tensor '%.200s' (byte %zu): unsupported dtype %.20s", key, dt->pos + 8,
                       dt->type == JSON_STRING ? dt->str : "(not a string)");
            goto fail;
        }
        if (sh->type != JSON_ARRAY || sh->n > ST_MAX_DIMS) {
            err = errf("tensor '%.200s' (byte %zu): shape must be an array of at most %d integers", key, sh->pos + 8, ST_MAX_DIMS);
            goto fail;
        }
        t->ndim = sh->n;
        // count * dtype size must not overflow: bound by the data section size as we go.
        unsigned __int128 count = 1;
        for (int d = 0; d < sh->n; d++) {
            const JsonValue *x = &sh->items[d];
            if (x->type != JSON_NUMBER || !x->is_int || x->inum < 0) {
                err = errf("tensor '%.200s' (byte %zu): shape entry %d is not a non-negative integer", key, x->pos + 8, d);
                goto fail;
            }
            t->shape[d] = x->inum;
            count *= (uint64_t)x->inum;
            if (count > (unsigned __int128)UINT64_MAX) count = (unsigned __int128)UINT64_MAX + 1;
        }
        if (off->type != JSON_ARRAY || off->n != 2 || off->items[0].type != JSON_NUMBER || !off->items[0].is_int ||
            off->items[1].type != JSON_NUMBER || !off->items[1].is_int || off->items[0].inum < 0 ||
            off->items[1].inum < off->items[0].inum) {
            err = errf("tensor '%.200s' (byte %zu): data_offsets must be [begin, end] with 0 <= begin <= end", key, off->pos + 8);
            goto fail;
        }
        uint64_t b = (uint64_t)off->items[0].inum, e = (uint64_t)off->items[1].inum;
        if (e > data_size) {
            err = errf("tensor '%.200s': data_offsets [%llu, %llu] run past the data section (%zu bytes from byte %llu; file truncated?)",
                       key, (unsigned long long)b, (unsigned long long)e, data_size, (unsigned long long)(8 + hlen));
            goto fail;
        }
        unsigned __int128 want = count * DTYPES[t->dtype].size;
        if (want != (unsigned __int128)(e - b)) {
            char s[200];
            shape_str(s, sizeof s, t->ndim, t->shape);
            err = errf("tensor '%.200s': %llu bytes in data_offsets, but shape %s of %s needs %llu", key,
                       (unsigned long long)(e - b), s, DTYPES[t->dtype].name, (unsigned long long)want);
            goto fail;
        }
        t->name = ct_strdup(key);
        t->count = (size_t)count;
        t->data = data + b;
        t->nbytes = (size_t)(e - b);
        f->n++;
    }
    // Tensors must not overlap (the format requires a dense, non-overlapping data section).
    if (f->n > 1) {
        const StTensor **order = ct_alloc(f->n * sizeof(StTensor *));
        for (int i = 0; i < f->n; i++) order[i] = &f->t[i];
        qsort(order, f->n, sizeof *order, cmp_begin);
        for (int i = 1; i < f->n; i++)
            if (order[i]->data < order[i - 1]->data + order[i - 1]->nbytes) {
                err = errf("tensors '%.200s' and '%.200s' overlap in the data section", order[i - 1]->name, order[i]->name);
                break;
            }
        free(order);
        if (err) goto fail;
    }
    json_free(&root);
    f->buf = (uint8_t *)buf;
    f->size = size;
    f->owned = 0;
    return NULL;
fail:
    json_free(&root);
    file_free_tables(f);
    memset(f, 0, sizeof *f);
    return err;
}

char *st_open(const char *path, StFile *f) {
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    if (!fp) return errf("%s: cannot open: %s", path, strerror(errno));
    uint8_t *buf = NULL;
    size_t size = 0, cap = 0;
    for (;;) {
        if (size == cap) {
            cap = cap ? 2 * cap : 1 << 20;
            buf = ct_realloc(buf, cap);
        }
        size_t got = fread(buf + size, 1, cap - size, fp);
        size += got;
        if (got == 0) break;
    }
    int rerr = ferror(fp);
    fclose(fp);
    if (rerr) {
        free(buf);
        return errf("%s: read error", path);
    }
    char *err = st_parse(buf, size, f);
    if (err) {
        free(buf);
        char *e = errf("%s: %s", path, err);
        free(err);
        return e;
    }
    f->owned = 1;
    return NULL;
}

void st_close(StFile *f) {
    if (!f) return;
    file_free_tables(f);
    if (f->owned) free(f->buf);
    memset(f, 0, sizeof *f);
}

const StTensor *st_find(const StFile *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

const char *st_meta(const StFile *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_key[i], key) == 0) return f->meta_val[i];
    return NULL;
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else {  // subnormal: normalise
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3FF) << 13);
        }
    } else if (exp == 31) bits = sign | 0x7F800000u | (man << 13);
    else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

char *st_to_f32(const StTensor *t, float *dst, size_t count) {
    if (count != t->count) return errf("tensor '%s': %zu elements, %zu expected", t->name, t->count, count);
    for (size_t i = 0; i < count; i++) {
        const uint8_t *p = t->data + i * DTYPES[t->dtype].size;
        switch (t->dtype) {
        case ST_F32: memcpy(&dst[i], p, 4); break;
        case ST_F64: {
            double d;
            memcpy(&d, p, 8);
            dst[i] = (float)d;
            break;
        }
        case ST_F16: {
            uint16_t h;
            memcpy(&h, p, 2);
            dst[i] = half_to_float(h);
            break;
        }
        case ST_BF16: {
            uint16_t h;
            memcpy(&h, p, 2);
            dst[i] = ct_bf16_to_f32(h);
            break;
        }
        default:
            return errf("tensor '%s': dtype %s is not a floating point type", t->name, DTYPES[t->dtype].name);
        }
    }
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// Writing.
static void json_escape(char **buf, size_t *len, size_t *cap, const char *s) {
    for (; *s; s++) {
        if (*len + 8 >= *cap) {
            *cap = *cap * 2 + 64;
            *buf = ct_realloc(*buf, *cap);
        }
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            (*buf)[(*len)++] = '\\';
            (*buf)[(*len)++] = (char)c;
        } else if (c < 0x20) {
            *len += (size_t)snprintf(*buf + *len, 8, "\\u%04x", c);
        } else (*buf)[(*len)++] = (char)c;
    }
}

static void append(char **buf, size_t *len, size_t *cap, const char *s) {
    size_t n = strlen(s);
    if (*len + n + 1 >= *cap) {
        *cap = (*cap + n) * 2 + 64;
        *buf = ct_realloc(*buf, *cap);
    }
    memcpy(*buf + *len, s, n + 1);
    *len += n;
}

void st_write(const char *path, const StWrite *ts, int n, const char *const *meta_keys,
              const char *const *meta_vals, int n_meta) {
    char *h = NULL;
    size_t len = 0, cap = 0;
    append(&h, &len, &cap, "{");
    if (n_meta > 0) {
        append(&h, &len, &cap, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            append(&h, &len, &cap, i ? ",\"" : "\"");
            json_escape(&h, &len, &cap, meta_keys[i]);
            append(&h, &len, &cap, "\":\"");
            json_escape(&h, &len, &cap, meta_vals[i]);
            append(&h, &len, &cap, "\"");
        }
        append(&h, &len, &cap, "}");
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const StWrite *t = &ts[i];
        if (t->dtype < 0 || t->dtype >= ST_NDTYPES || t->ndim < 0 || t->ndim > ST_MAX_DIMS)
            ct_die("%s: tensor '%s': bad dtype or ndim", path, t->name);
        uint64_t count = 1;
        for (int d = 0; d < t->ndim; d++) count *= (uint64_t)t->shape[d];
        uint64_t bytes = count * DTYPES[t->dtype].size;
        char tmp[128];
        append(&h, &len, &cap, (i || n_meta > 0) ? ",\"" : "\"");
        json_escape(&h, &len, &cap, t->name);
        snprintf(tmp, sizeof tmp, "\":{\"dtype\":\"%s\",\"shape\":[", DTYPES[t->dtype].name);
        append(&h, &len, &cap, tmp);
        for (int d = 0; d < t->ndim; d++) {
            snprintf(tmp, sizeof tmp, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            append(&h, &len, &cap, tmp);
        }
        snprintf(tmp, sizeof tmp, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + bytes));
        append(&h, &len, &cap, tmp);
        off += bytes;
    }
    append(&h, &len, &cap, "}");
    // Pad the header with spaces so the data section starts 8-byte aligned (as the reference
    // implementation does).
    while ((8 + len) % 8) append(&h, &len, &cap, " ");
    uint8_t hl[8];
    for (int i = 0; i < 8; i++) hl[i] = (uint8_t)((uint64_t)len >> (8 * i));
    AtomicFile af = ct_atomic_open(path);
    ct_atomic_write(&af, hl, 8);
    ct_atomic_write(&af, h, len);
    for (int i = 0; i < n; i++) {
        uint64_t count = 1;
        for (int d = 0; d < ts[i].ndim; d++) count *= (uint64_t)ts[i].shape[d];
        ct_atomic_write(&af, ts[i].data, count * DTYPES[ts[i].dtype].size);
    }
    ct_atomic_commit(&af);
    free(h);
}

// ---------------------------------------------------------------------------------------------
// ResNet state <-> torchvision state_dict.
void st_save_resnet(const char *path, const ResNet *m, const StWrite *extra, int n_extra,
                    const char *const *meta_keys, const char *const *meta_vals, int n_meta) {
    int n = m->n_entries + n_extra;
    StWrite *ts = ct_zalloc((n + 1) * sizeof(StWrite));
    float *torch_params = ct_alloc(CT_MAX(m->n_params, 1) * sizeof(float));
    for (int i = 0; i < m->n_entries; i++) {
        const StateEntry *e = &m->entries[i];
        StWrite *t = &ts[i];
        t->name = e->name;
        t->ndim = e->ndim;
        for (int d = 0; d < e->ndim; d++) t->shape[d] = e->shape[d];
        if (e->kind == ENTRY_COUNT) {
            t->dtype = ST_I64;
            t->data = m->counts + e->offset;
        } else if (e->kind == ENTRY_BUF) {
            t->dtype = ST_F32;
            t->data = m->bufs + e->offset;
        } else {
            t->dtype = ST_F32;
            float *dst = torch_params + e->offset;
            if (e->is_conv)
                krsc_to_oihw(dst, m->params + e->offset, (int)e->shape[0], (int)e->shape[1], (int)e->shape[2],
                             (int)e->shape[3]);
            else memcpy(dst, m->params + e->offset, e->count * sizeof(float));
            t->data = dst;
        }
    }
    for (int i = 0; i < n_extra; i++) ts[m->n_entries + i] = extra[i];
    // "format": "pt" lets safetensors.torch recognise the file; the architecture helps humans.
    int nm = n_meta + 2;
    const char **mk = ct_alloc(nm * sizeof(char *)), **mv = ct_alloc(nm * sizeof(char *));
    mk[0] = "format";
    mv[0] = "pt";
    mk[1] = "ctrain_arch";
    mv[1] = m->arch;
    for (int i = 0; i < n_meta; i++) {
        mk[2 + i] = meta_keys[i];
        mv[2 + i] = meta_vals[i];
    }
    st_write(path, ts, n, mk, mv, nm);
    free(mk);
    free(mv);
    free(torch_params);
    free(ts);
}

char *st_load_resnet_from(const StFile *f, ResNet *m, const char *allow_prefix) {
    const StTensor **found = ct_zalloc((m->n_entries + 1) * sizeof(StTensor *));
    char *err = NULL;
    for (int i = 0; i < m->n_entries && !err; i++) {
        const StateEntry *e = &m->entries[i];
        const StTensor *t = st_find(f, e->name);
        int want = e->kind == ENTRY_COUNT ? ST_I64 : ST_F32;
        char a[200], b[200];
        if (!t) {
            err = errf("missing tensor '%s' (%s needs it)", e->name, m->arch);
        } else if (t->dtype != want) {
            err = errf("tensor '%s' has dtype %s, expected %s", e->name, st_dtype_name(t->dtype), st_dtype_name(want));
        } else {
            int same = t->ndim == e->ndim;
            for (int d = 0; same && d < e->ndim; d++) same = t->shape[d] == e->shape[d];
            if (!same) {
                shape_str(a, sizeof a, t->ndim, t->shape);
                shape_str(b, sizeof b, e->ndim, e->shape);
                err = errf("tensor '%s' has shape %s, %s (in_channels %d, classes %d) expects %s", e->name, a, m->arch,
                           m->in_channels, m->num_classes, b);
            }
        }
        found[i] = t;
    }
    for (int i = 0; i < f->n && !err; i++) {
        const char *name = f->t[i].name;
        if (allow_prefix && allow_prefix[0] && strncmp(name, allow_prefix, strlen(allow_prefix)) == 0) continue;
        if (resnet_find_entry(m, name) < 0) err = errf("unexpected tensor '%s' (not in %s)", name, m->arch);
    }
    if (!err) {
        for (int i = 0; i < m->n_entries; i++) {
            const StateEntry *e = &m->entries[i];
            const StTensor *t = found[i];
            if (e->kind == ENTRY_COUNT) memcpy(m->counts + e->offset, t->data, e->count * sizeof(int64_t));
            else if (e->kind == ENTRY_BUF) memcpy(m->bufs + e->offset, t->data, e->count * sizeof(float));
            else if (e->is_conv) {
                float *tmp = ct_alloc(e->count * sizeof(float));
                memcpy(tmp, t->data, e->count * sizeof(float));
                oihw_to_krsc(m->params + e->offset, tmp, (int)e->shape[0], (int)e->shape[1], (int)e->shape[2],
                             (int)e->shape[3]);
                free(tmp);
            } else memcpy(m->params + e->offset, t->data, e->count * sizeof(float));
        }
    }
    free(found);
    return err;
}

void st_load_resnet(const char *path, ResNet *m) {
    StFile f;
    char *err = st_open(path, &f);
    if (err) ct_die("%s", err);
    err = st_load_resnet_from(&f, m, NULL);
    if (err) ct_die("%s: %s", path, err);
    st_close(&f);
}
