// train: placeholder until the driver lands (issue 4).
#include "util/common.h"
int main(int argc, char **argv) {
    (void)argc; (void)argv;
    ct_die("train is not built yet");
}
