// util/: CRC-32C against published check values, RNG determinism and range, atomic files.
#include <string.h>
#include <unistd.h>

#include "tests/test.h"
#include "util/common.h"
#include "util/crc32c.h"
#include "util/rng.h"

int main(void) {
    // RFC 3720 / iSCSI check value.
    CHECK(crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c(123456789) = %08x", crc32c(0, "123456789", 9));
    uint8_t zeros[32] = {0};
    CHECK(crc32c(0, zeros, 32) == 0x8A9136AAu, "crc32c(32 zeros) = %08x", crc32c(0, zeros, 32));
    // Incremental equals one-shot.
    const char *msg = "the quick brown fox jumps over the lazy dog, twice over";
    uint32_t whole = crc32c(0, msg, strlen(msg));
    uint32_t part = crc32c(crc32c(0, msg, 13), msg + 13, strlen(msg) - 13);
    CHECK(whole == part, "incremental crc differs");

    Rng a = rng_make(7, 3, 11), b = rng_make(7, 3, 11), c = rng_make(7, 3, 12);
    int same = 1, differ = 0;
    double mean = 0;
    for (int i = 0; i < 10000; i++) {
        float ua = rng_uniform(&a), ub = rng_uniform(&b), uc = rng_uniform(&c);
        same &= ua == ub;
        differ += ua != uc;
        CHECK(ua >= 0.0f && ua < 1.0f, "uniform out of range: %g", ua);
        mean += ua;
    }
    CHECK(same, "same key gives different streams");
    CHECK(differ > 9900, "different keys give similar streams (%d differ)", differ);
    CHECK(fabs(mean / 10000 - 0.5) < 0.02, "uniform mean %g", mean / 10000);

    char path[] = "/tmp/ctrain_test_util_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    AtomicFile af = ct_atomic_open(path);
    ct_atomic_write(&af, "hello", 5);
    CHECK(access(af.tmp_path, F_OK) == 0, "temporary not created");
    ct_atomic_commit(&af);
    size_t n;
    char *s = ct_read_file(path, &n);
    CHECK(n == 5 && memcmp(s, "hello", 5) == 0, "atomic file content");
    free(s);
    unlink(path);
    return test_summary("test_util");
}
