// libFuzzer target: packdata's image decoders (JPEG via libjpeg-turbo, PNG via libpng, chosen by
// magic bytes) over arbitrary bytes, to both channel counts. Any input must give pixels or an error
// string: no crash, leak, hang or exit. Images are capped at 1M pixels so each input stays fast.
#include <stdint.h>
#include <stdlib.h>

#include "loader/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    image_max_pixels = 1u << 20;
    char err[256];
    for (int channels = 1; channels <= 3; channels += 2) {
        uint8_t *px = NULL;
        uint32_t h = 0, w = 0;
        if (image_decode(data, size, channels, &px, &h, &w, err, sizeof err) == 0) {
            // Touch every pixel so a short buffer shows up under ASan.
            uint32_t sum = 0;
            for (size_t i = 0; i < (size_t)h * w * channels; i++) sum += px[i];
            (void)sum;
            free(px);
        }
    }
    return 0;
}
