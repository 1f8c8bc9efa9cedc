#include "util/tfevents.h"

#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "util/common.h"
#include "util/crc32c.h"
#include "util/varint.h"

// Protobuf wire format, just what Event/Summary need: varints, fixed64 doubles, fixed32 floats and
// length-delimited fields. Field numbers from tensorflow/core/util/event.proto and summary.proto:
// Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
// Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
typedef struct {
    uint8_t *p;
    size_t n, cap;
    int overflow;
} Buf;

static void put(Buf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->overflow = 1;
        return;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}
static void put_varint(Buf *b, uint64_t v) {
    uint8_t tmp[10];
    put(b, tmp, ct_varint_encode(tmp, v));
}
static void put_tag(Buf *b, int field, int wire) { put_varint(b, ((uint64_t)field << 3) | wire); }
static void put_le(Buf *b, uint64_t v, int bytes) {
    uint8_t tmp[8];
    for (int i = 0; i < bytes; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    put(b, tmp, bytes);
}
static void put_double(Buf *b, int field, double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    put_tag(b, field, 1);
    put_le(b, u, 8);
}
static void put_float(Buf *b, int field, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    put_tag(b, field, 5);
    put_le(b, u, 4);
}
static void put_bytes(Buf *b, int field, const void *data, size_t n) {
    put_tag(b, field, 2);
    put_varint(b, n);
    put(b, data, n);
}

// Frames an Event payload as a TFRecord into out.
static size_t frame(uint8_t *out, size_t cap, const uint8_t *payload, size_t n) {
    if (cap < n + 16) return 0;
    Buf b = {out, 0, cap, 0};
    put_le(&b, n, 8);
    uint32_t len_crc = crc32c_mask(crc32c(0, out, 8));
    put_le(&b, len_crc, 4);
    put(&b, payload, n);
    put_le(&b, crc32c_mask(crc32c(0, payload, n)), 4);
    return b.overflow ? 0 : b.n;
}

static double wall_now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

size_t tfevents_encode_scalar(uint8_t *buf, size_t cap, double wall_time, int64_t step, const char *tag,
                              float value) {
    uint8_t value_msg[512], summary[600], event[700];
    size_t tag_len = strlen(tag);
    if (tag_len > 400) return 0;
    Buf v = {value_msg, 0, sizeof value_msg, 0};
    put_bytes(&v, 1, tag, tag_len);
    put_float(&v, 2, value);
    Buf s = {summary, 0, sizeof summary, 0};
    put_bytes(&s, 1, value_msg, v.n);
    Buf e = {event, 0, sizeof event, 0};
    put_double(&e, 1, wall_time);
    put_tag(&e, 2, 0);
    put_varint(&e, (uint64_t)step);
    put_bytes(&e, 5, summary, s.n);
    if (v.overflow || s.overflow || e.overflow) return 0;
    return frame(buf, cap, event, e.n);
}

TfEvents *tfevents_open(const char *dir) {
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    size_t n = strlen(dir) + strlen(host) + 96;
    TfEvents *w = ct_zalloc(sizeof *w);
    w->path = ct_alloc(n);
    snprintf(w->path, n, "%s/events.out.tfevents.%lld.%s.ctrain", dir, (long long)time(NULL), host);
    w->f = fopen(w->path, "wb");
    if (!w->f) ct_die_errno("cannot create TensorBoard event file %s", w->path);
    uint8_t event[64], rec[96];
    Buf e = {event, 0, sizeof event, 0};
    put_double(&e, 1, wall_now());
    put_bytes(&e, 3, "brain.Event:2", 13);
    size_t len = frame(rec, sizeof rec, event, e.n);
    if (fwrite(rec, 1, len, w->f) != len) ct_die_errno("writing %s", w->path);
    fflush(w->f);
    return w;
}

void tfevents_scalar(TfEvents *w, const char *tag, int64_t step, float value) {
    uint8_t rec[1024];
    size_t len = tfevents_encode_scalar(rec, sizeof rec, wall_now(), step, tag, value);
    if (!len) ct_die("TensorBoard tag too long: %.60s...", tag);
    if (fwrite(rec, 1, len, w->f) != len) ct_die_errno("writing %s", w->path);
}

void tfevents_flush(TfEvents *w) {
    if (fflush(w->f) != 0) ct_die_errno("writing %s", w->path);
}

void tfevents_close(TfEvents *w) {
    if (!w) return;
    if (fclose(w->f) != 0) ct_die_errno("closing %s", w->path);
    free(w->path);
    free(w);
}
