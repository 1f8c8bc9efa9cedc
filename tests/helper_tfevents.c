// Writes a TensorBoard event file with known scalars into DIR, for tests/test_tfevents.sh.
#include <math.h>
#include <stdlib.h>

#include "util/common.h"
#include "util/tfevents.h"

int main(int argc, char **argv) {
    if (argc != 2) ct_die("usage: helper_tfevents DIR");
    TfEvents *w = tfevents_open(argv[1]);
    for (int step = 0; step < 300; step++) {
        tfevents_scalar(w, "train/loss", step, 2.5f * expf(-step / 100.0f));
        if (step % 100 == 99) tfevents_scalar(w, "val/top1", step, 0.5f + step / 1000.0f);
    }
    // A long tag and extreme values must round-trip too.
    tfevents_scalar(w, "a/very/long/tag/name/that/goes/on/and/on/for/a/while/to/test/varint/lengths", 1 << 20,
                    -1.25e-30f);
    tfevents_scalar(w, "big", 5000000000LL, 3.0e38f);
    tfevents_close(w);
    return 0;
}
