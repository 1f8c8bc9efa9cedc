// CRC-32C (Castagnoli): shard checksums and TensorBoard's TFRecord framing.
#pragma once
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
uint32_t crc32c(uint32_t crc, const void *data, size_t n);  // start with crc = 0
// TFRecord's masked form: rotate right by 15 and add a constant.
static inline uint32_t crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
#ifdef __cplusplus
}
#endif
