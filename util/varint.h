// Protobuf's base-128 varint, shared by the two hand-written protobuf writers (util/tfevents.c
// for TensorBoard events, nn/onnx.c for ONNX models).
#pragma once
#include <stddef.h>
#include <stdint.h>

// Writes v into out, 7 bits a byte, low first, the high bit set on all but the last; returns the
// byte count (1..10).
static inline size_t ct_varint_encode(uint8_t out[10], uint64_t v) {
    size_t k = 0;
    do {
        out[k] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) out[k] |= 0x80;
        k++;
    } while (v);
    return k;
}
