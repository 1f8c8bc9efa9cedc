// Image files for packdata and JPEG shard payloads: JPEG through libjpeg-turbo, PNG through libpng.
// The format is recognised by its first bytes, never by the file name (ImageNet has a PNG named
// .JPEG). Every function here returns an error string instead of exiting: packdata reports a bad
// file and goes on, and the shard fuzzer drives the JPEG decoder with arbitrary bytes.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { IMAGE_UNKNOWN = 0, IMAGE_JPEG = 1, IMAGE_PNG = 2 };
int image_kind(const uint8_t *data, size_t n);  // by magic bytes

#define IMAGE_MAX_DIM 65535u
#define IMAGE_MAX_PIXELS (1ull << 28)
// Largest image image_decode accepts (IMAGE_MAX_PIXELS; fuzzers lower it to keep inputs fast).
extern uint64_t image_max_pixels;

// Decode a JPEG (baseline or progressive; grayscale, YCbCr, RGB, CMYK or YCCK) or a PNG (any bit
// depth, palette, alpha) to 8-bit HWC with `channels` (1 or 3) channels:
//   colour -> gray: ITU-R 601 luma (R*19595 + G*38470 + B*7471 + 32768) >> 16, as PIL's convert("L");
//   gray -> colour: replicated; alpha is dropped (not composited), as PIL's convert("RGB");
//   16-bit samples keep their high byte; CMYK/YCCK -> RGB as (255-C)(255-K)/255 (Adobe-inverted
//   files handled), as PIL does.
// On success *pixels is malloc'd (free()), returns 0. On failure returns -1 with the reason in err.
int image_decode(const uint8_t *data, size_t n, int channels, uint8_t **pixels, uint32_t *height, uint32_t *width,
                 char *err, size_t errlen);

// Decode a JPEG straight into dst, which holds exactly height*width*channels bytes; fails when the
// JPEG's size differs (shard JPEG payloads: the index says what the payload must be).
int image_decode_jpeg_into(const uint8_t *data, size_t n, uint32_t channels, uint8_t *dst, uint32_t height,
                           uint32_t width, char *err, size_t errlen);

// Baseline JPEG (4:2:0 for colour, default libjpeg tables scaled by quality 1..100). Returns a
// malloc'd buffer, or NULL with the reason in err.
uint8_t *image_encode_jpeg(const uint8_t *pixels, uint32_t height, uint32_t width, uint32_t channels, int quality,
                           size_t *out_size, char *err, size_t errlen);

// RGB -> gray in place-safe form (dst may equal src): n pixels.
void image_rgb_to_gray(uint8_t *dst, const uint8_t *src, size_t n);

#ifdef __cplusplus
}
#endif
