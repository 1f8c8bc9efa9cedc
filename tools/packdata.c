// packdata: placeholder until the shard writer lands (issue 3).
#include "util/common.h"
int main(int argc, char **argv) {
    (void)argc; (void)argv;
    ct_die("packdata is not built yet");
}
