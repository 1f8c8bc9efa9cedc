// Safetensors I/O and the torchvision state_dict mapping of a ResNet.
#include "nn/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <string.h>

#include "util/bf16.h"
#include "util/common.h"

#define ST_MAX_HEADER 100000000

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

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a non-integer number";
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    default: return "null";
    }
}

// Decodes the JSON string token text[b, e) (quotes included); NULL if it is not one.
static char *string_token(const char *text, size_t b, size_t e) {
    json_t *s = json_loadb(text + b, e - b, JSON_DECODE_ANY, NULL);
    char *out = json_is_string(s) ? ct_strdup(json_string_value(s)) : NULL;
    json_decref(s);
    return out;
}

// jansson reports a syntax error by byte position only (a duplicate key: just past the key). To
// name what is at fault, walk the header up to that position, which jansson has already lexed as
// valid JSON, so a string followed by ':' is a key: *entry gets the top-level key whose value
// holds the position (the tensor or "__metadata__"), *last the last string token that ends
// before it (for a duplicate key, the key itself). Either may come back NULL. Returns the nesting
// depth at the position (1: inside the header object itself).
static int locate(const char *text, size_t pos, char **entry, char **last) {
    int depth = 0, in_str = 0;
    size_t sb = 0, pend_b = 0, pend_e = 0, entry_b = 0, entry_e = 0;  // token spans; e == 0: none
    for (size_t i = 0; i < pos; i++) {
        char c = text[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') {
                in_str = 0;
                pend_b = sb;
                pend_e = i + 1;
            }
            continue;
        }
        if (c == '"') {
            in_str = 1;
            sb = i;
        } else if (c == ':' && depth == 1 && pend_e) {
            entry_b = pend_b;
            entry_e = pend_e;
        } else if (c == ',' && depth == 1) entry_e = 0;
        else if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') depth--;
    }
    *entry = entry_e ? string_token(text, entry_b, entry_e) : NULL;
    *last = pend_e && !in_str ? string_token(text, pend_b, pend_e) : NULL;
    return depth;
}

// "tensor 'w'" or "__metadata__", for messages.
static char *entry_label(const char *key) {
    if (!key) return NULL;
    if (strcmp(key, "__metadata__") == 0) return ct_strdup("__metadata__");
    return errf("tensor '%.200s'", key);
}

static char *syntax_error(const char *htext, const json_error_t *je) {
    size_t pos = je->position > 0 ? (size_t)je->position : 0;
    char *entry = NULL, *last = NULL;
    int depth = locate(htext, pos, &entry, &last);
    char *where = entry_label(entry), *e;
    if (json_error_code(je) == json_error_duplicate_key && last) {
        // A key repeated at the top level is a tensor named twice; deeper, a field of one entry.
        if (depth > 1 && where)
            e = errf("%s: duplicate key \"%.200s\" (byte %zu)", where, last, pos + 8);
        else e = errf("duplicate key \"%.200s\" (byte %zu): a tensor or __metadata__ named twice", last, pos + 8);
    } else if (where) e = errf("malformed JSON header at byte %zu (in %s): %s", pos + 8, where, je->text);
    else e = errf("malformed JSON header at byte %zu: %s", pos + 8, je->text);
    free(entry);
    free(last);
    free(where);
    return e;
}

// A JSON integer in [0, INT64_MAX]; jansson has already refused integers beyond int64.
static int nonneg_int(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return 0;
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

// One tensor entry of the header into t (name excluded); NULL or the error text.
static char *parse_entry(const char *key, const json_t *v, const uint8_t *data, size_t data_size, uint64_t hlen,
                         StTensor *t) {
    if (!json_is_object(v)) return errf("tensor '%.200s': entry is %s, not an object", key, json_kind(v));
    const json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
                 *off = json_object_get(v, "data_offsets");
    if (!dt || !sh || !off)
        return errf("tensor '%.200s': missing \"%s\"", key, !dt ? "dtype" : !sh ? "shape" : "data_offsets");
    if (!json_is_string(dt)) return errf("tensor '%.200s': dtype is %s, not a string", key, json_kind(dt));
    t->dtype = -1;
    for (int d = 0; d < ST_NDTYPES; d++)
        if (strcmp(json_string_value(dt), DTYPES[d].name) == 0) t->dtype = d;
    if (t->dtype < 0) return errf("tensor '%.200s': unsupported dtype %.20s", key, json_string_value(dt));
    if (!json_is_array(sh) || json_array_size(sh) > ST_MAX_DIMS)
        return errf("tensor '%.200s': shape must be an array of at most %d integers (it is %s%s)", key, ST_MAX_DIMS,
                    json_kind(sh), json_is_array(sh) ? " too long" : "");
    t->ndim = (int)json_array_size(sh);
    // count * dtype size must not overflow: saturate just above UINT64_MAX, which no file can hold.
    unsigned __int128 count = 1;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t x;
        if (!nonneg_int(json_array_get(sh, d), &x))
            return errf("tensor '%.200s': shape entry %d is not a non-negative integer", key, d);
        t->shape[d] = (int64_t)x;
        count *= x;
        if (count > (unsigned __int128)UINT64_MAX) count = (unsigned __int128)UINT64_MAX + 1;
    }
    uint64_t b, e;
    if (!json_is_array(off) || json_array_size(off) != 2 || !nonneg_int(json_array_get(off, 0), &b) ||
        !nonneg_int(json_array_get(off, 1), &e))
        return errf("tensor '%.200s': data_offsets must be [begin, end], two non-negative integers", key);
    if (b > e)
        return errf("tensor '%.200s': data_offsets [%llu, %llu] must be [begin, end] with 0 <= begin <= end", key,
                    (unsigned long long)b, (unsigned long long)e);
    if (e > data_size)
        return errf("tensor '%.200s': data_offsets [%llu, %llu] run past the data section (%zu bytes from byte %llu; "
                    "file truncated?)",
                    key, (unsigned long long)b, (unsigned long long)e, data_size, (unsigned long long)(8 + hlen));
    unsigned __int128 want = count * DTYPES[t->dtype].size;
    if (want != (unsigned __int128)(e - b)) {
        char s[200];
        shape_str(s, sizeof s, t->ndim, t->shape);
        return errf("tensor '%.200s': %llu bytes in data_offsets, but shape %s of %s needs %llu", key,
                    (unsigned long long)(e - b), s, DTYPES[t->dtype].name,
                    want > UINT64_MAX ? (unsigned long long)UINT64_MAX : (unsigned long long)want);
    }
    t->count = (size_t)count;
    t->data = data + b;
    t->nbytes = (size_t)(e - b);
    return NULL;
}

// The format requires the tensors to tile the data section: no overlap, no hole, nothing after
// the last one (a hole could hide a second file in the data).
static char *check_tiling(const StFile *f, const uint8_t *data, size_t data_size) {
    if (f->n == 0)
        return data_size ? errf("%zu bytes of data but no tensors in the header", data_size) : NULL;
    const StTensor **order = ct_alloc(f->n * sizeof(StTensor *));
    for (int i = 0; i < f->n; i++) order[i] = &f->t[i];
    qsort(order, f->n, sizeof *order, cmp_begin);
    char *err = NULL;
    size_t end = 0;
    for (int i = 0; i < f->n && !err; i++) {
        size_t b = (size_t)(order[i]->data - data);
        if (b < end)
            err = errf("tensors '%.200s' and '%.200s' overlap in the data section", order[i - 1]->name, order[i]->name);
        else if (b > end)
            err = errf("data section bytes [%zu, %zu) belong to no tensor (hole before tensor '%.200s')", end, b,
                       order[i]->name);
        end = b + order[i]->nbytes;
    }
    if (!err && end != data_size)
        err = errf("data section bytes [%zu, %zu) belong to no tensor (after tensor '%.200s', the last one)", end,
                   data_size, order[f->n - 1]->name);
    free(order);
    return err;
}

char *st_parse(const uint8_t *buf, size_t size, StFile *f) {
    memset(f, 0, sizeof *f);
    if (size < 8) return errf("file is %zu bytes, shorter than the 8-byte header length", size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > size - 8)
        return errf("header length %llu (bytes 0-7) runs past the end of the %zu-byte file (truncated?)",
                    (unsigned long long)hlen, size);
    // The reference reader's limit; it also keeps jansson's int byte positions exact.
    if (hlen > ST_MAX_HEADER)
        return errf("header length %llu (bytes 0-7) is over the %d-byte limit of safetensors headers",
                    (unsigned long long)hlen, ST_MAX_HEADER);
    const char *htext = (const char *)buf + 8;
    // The spec: the header starts with '{' and may be padded at the end with spaces (0x20) so the
    // data is aligned; that is all the reference writer emits, so nothing else is accepted.
    if (hlen == 0 || htext[0] != '{') return errf("header (byte 8) is not a JSON object: it must start with '{'");
    json_error_t je;
    // DISABLE_EOF_CHECK: stop after the object and report in je.position how far it went, so the
    // padding rule above is ours to apply (jansson would allow any whitespace and no other byte).
    json_t *root = json_loadb(htext, (size_t)hlen, JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK, &je);
    if (!root) return syntax_error(htext, &je);
    char *err = NULL;
    for (size_t i = (size_t)je.position; i < hlen; i++)
        if (htext[i] != ' ') {
            err = errf("byte %zu (0x%02x) follows the header's JSON object: only spaces may pad the header", 8 + i,
                       (unsigned char)htext[i]);
            goto fail;
        }
    if (!json_is_object(root)) {
        err = errf("header (byte 8) is not a JSON object");
        goto fail;
    }
    const uint8_t *data = buf + 8 + hlen;
    size_t data_size = size - 8 - (size_t)hlen;
    f->t = ct_zalloc((json_object_size(root) + 1) * sizeof(StTensor));
    // jansson keeps keys in file order and refuses keys holding NUL, so names are C strings.
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(v)) {
                err = errf("__metadata__ is %s, not an object of strings", json_kind(v));
                goto fail;
            }
            f->meta_key = ct_zalloc((json_object_size(v) + 1) * sizeof(char *));
            f->meta_val = ct_zalloc((json_object_size(v) + 1) * sizeof(char *));
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) {
                    err = errf("__metadata__ value of \"%.100s\" is %s, not a string", mk, json_kind(mv));
                    goto fail;
                }
                f->meta_key[f->n_meta] = ct_strdup(mk);
                f->meta_val[f->n_meta] = ct_strdup(json_string_value(mv));
                f->n_meta++;
            }
            continue;
        }
        StTensor *t = &f->t[f->n];
        if ((err = parse_entry(key, v, data, data_size, hlen, t))) goto fail;
        t->name = ct_strdup(key);
        f->n++;
    }
    if ((err = check_tiling(f, data, data_size))) goto fail;
    json_decref(root);
    f->buf = (uint8_t *)buf;
    f->size = size;
    f->owned = 0;
    return NULL;
fail:
    json_decref(root);
    file_free_tables(f);
    memset(f, 0, sizeof *f);
    return err;
}

char *st_open(const char *path, StFile *f) {
    memset(f, 0, sizeof *f);
    char *text, why[256];
    size_t size;
    if (ct_read_file_err(path, &text, &size, why, sizeof why) != 0) return errf("%s: %s", path, why);
    uint8_t *buf = (uint8_t *)text;
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
// jansson builds the header (escaping, UTF-8 checks, key order as inserted). A name that is not
// valid UTF-8 or that repeats would make a file no reader accepts, so it is refused here.
static void header_set(const char *path, json_t *obj, const char *what, const char *key, json_t *val) {
    if (!val || json_object_get(obj, key) || json_object_set_new(obj, key, val) != 0)
        ct_die("%s: %s \"%s\" is repeated or is not valid UTF-8", path, what, key);
}

void st_write(const char *path, const StWrite *ts, int n, const char *const *meta_keys,
              const char *const *meta_vals, int n_meta) {
    json_t *root = json_object();
    if (n_meta > 0) {
        json_t *meta = json_object();
        for (int i = 0; i < n_meta; i++) {
            json_t *val = json_string(meta_vals[i]);
            if (!val) ct_die("%s: value of metadata key \"%s\" is not valid UTF-8", path, meta_keys[i]);
            header_set(path, meta, "metadata key", meta_keys[i], val);
        }
        header_set(path, root, "entry", "__metadata__", meta);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const StWrite *t = &ts[i];
        if (t->dtype < 0 || t->dtype >= ST_NDTYPES || t->ndim < 0 || t->ndim > ST_MAX_DIMS)
            ct_die("%s: tensor '%s': bad dtype or ndim", path, t->name);
        uint64_t count = 1;
        json_t *shape = json_array();
        for (int d = 0; d < t->ndim; d++) {
            count *= (uint64_t)t->shape[d];
            json_array_append_new(shape, json_integer(t->shape[d]));
        }
        uint64_t bytes = count * DTYPES[t->dtype].size;
        json_t *entry = json_pack("{s:s, s:o, s:[I, I]}", "dtype", DTYPES[t->dtype].name, "shape", shape,
                                  "data_offsets", (json_int_t)off, (json_int_t)(off + bytes));
        header_set(path, root, "tensor", t->name, entry);
        off += bytes;
    }
    char *h = json_dumps(root, JSON_COMPACT);
    if (!h) ct_die("%s: out of memory building the safetensors header", path);
    json_decref(root);
    size_t len = strlen(h);
    // Pad the header with spaces so the data section starts 8-byte aligned (as the reference
    // implementation does).
    size_t pad = (8 - (8 + len) % 8) % 8;
    static const char spaces[8] = "        ";
    uint8_t hl[8];
    for (int i = 0; i < 8; i++) hl[i] = (uint8_t)((uint64_t)(len + pad) >> (8 * i));
    AtomicFile af = ct_atomic_open(path);
    ct_atomic_write(&af, hl, 8);
    ct_atomic_write(&af, h, len);
    ct_atomic_write(&af, spaces, pad);
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

static int has_prefix(const char *name, const char *prefix) {
    return prefix && prefix[0] && strncmp(name, prefix, strlen(prefix)) == 0;
}

char *st_load_resnet_from(const StFile *f, ResNet *m, const char *allow_prefix) {
    return st_load_resnet_except(f, m, allow_prefix, NULL);
}

char *st_load_resnet_except(const StFile *f, ResNet *m, const char *allow_prefix, const char *keep_prefix) {
    const StTensor **found = ct_zalloc((m->n_entries + 1) * sizeof(StTensor *));
    char *err = NULL;
    for (int i = 0; i < m->n_entries && !err; i++) {
        const StateEntry *e = &m->entries[i];
        if (has_prefix(e->name, keep_prefix)) continue;
        const StTensor *t = st_find(f, e->name);
        int want = e->kind == ENTRY_COUNT ? ST_I64 : ST_F32;
        char a[200], b[200];
        if (!t && e->kind == ENTRY_COUNT) {
            // torch's BatchNorm loads a state_dict without num_batches_tracked; so do we (as 0).
        } else if (!t) {
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
        if (has_prefix(name, allow_prefix) || has_prefix(name, keep_prefix)) continue;
        if (resnet_find_entry(m, name) < 0) err = errf("unexpected tensor '%s' (not in %s)", name, m->arch);
    }
    if (!err) {
        for (int i = 0; i < m->n_entries; i++) {
            const StateEntry *e = &m->entries[i];
            const StTensor *t = found[i];
            if (has_prefix(e->name, keep_prefix)) continue;
            if (e->kind == ENTRY_COUNT && !t) memset(m->counts + e->offset, 0, e->count * sizeof(int64_t));
            else if (e->kind == ENTRY_COUNT) memcpy(m->counts + e->offset, t->data, e->count * sizeof(int64_t));
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
