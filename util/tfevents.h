// TensorBoard event files written by ctrain itself: TFRecord framing (length, masked CRC-32C of the
// length, payload, masked CRC-32C of the payload) around hand-encoded `Event` protobufs holding
// scalar summaries. TensorBoard opens any file named "events.out.tfevents.*" in a run directory.
#pragma once
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    FILE *f;
    char *path;
} TfEvents;

// Creates DIR/events.out.tfevents.<unix time>.<host>.ctrain and writes the file-version event.
// Dies naming the path when the file cannot be created.
TfEvents *tfevents_open(const char *dir);
void tfevents_scalar(TfEvents *w, const char *tag, int64_t step, float value);
void tfevents_flush(TfEvents *w);  // fflush: TensorBoard sees what is written so far
void tfevents_close(TfEvents *w);

// Encoding helpers, exposed for tests: one complete framed record for a scalar event, written into
// buf (returns its length, or 0 if cap is too small).
size_t tfevents_encode_scalar(uint8_t *buf, size_t cap, double wall_time, int64_t step, const char *tag,
                              float value);

#ifdef __cplusplus
}
#endif
