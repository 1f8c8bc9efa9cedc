// Channel padding (nn/pad.h).
#include "nn/pad.h"

#include "util/common.h"

void pad_channels(float *out, const float *in, size_t rows, int C, int Cpad) {
    if (C > Cpad) ct_die("pad_channels: %d channels do not fit in %d", C, Cpad);
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < Cpad; c++) out[r * Cpad + c] = c < C ? in[r * C + c] : 0.0f;
}

void unpad_channels(float *out, const float *in, size_t rows, int Cpad, int C) {
    if (C > Cpad) ct_die("unpad_channels: %d channels do not fit in %d", C, Cpad);
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < C; c++) out[r * C + c] = in[r * Cpad + c];
}
