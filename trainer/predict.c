#include "trainer/predict.h"

#include "util/common.h"

int predict_main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    ct_die("predict: not written yet");
}
