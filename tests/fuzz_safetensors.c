// libFuzzer target: the safetensors parser (jansson under it, linked from build.sh's STATIC_LIBS)
// and the strict ResNet loader on arbitrary bytes. Must never crash, leak or read out of bounds;
// errors are strings. build.sh compiles fuzz targets over util/ and loader/ only, so the nn/
// sources come in here.
#include "nn/resnet.c"
#include "nn/safetensors.c"

static ResNet *model;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!model) model = resnet_create("resnet20", 3, 10);
    StFile f;
    char *err = st_parse(data, size, &f);
    if (err) {
        free(err);
        return 0;
    }
    for (int i = 0; i < f.n; i++) {
        if (f.t[i].count <= 4096 && (f.t[i].dtype == ST_F32 || f.t[i].dtype == ST_F16 || f.t[i].dtype == ST_BF16 ||
                                     f.t[i].dtype == ST_F64)) {
            float tmp[4096];
            char *e2 = st_to_f32(&f.t[i], tmp, f.t[i].count);
            free(e2);
        }
    }
    char *e3 = st_load_resnet_from(&f, model, "optim.");
    free(e3);
    st_close(&f);
    return 0;
}
