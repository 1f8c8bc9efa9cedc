// The command line to a run's settings (trainer/args.h).
#include "trainer/args.h"

#include <string.h>

#include "trainer/config_file.h"
#include "trainer/settings.h"
#include "util/common.h"

// p without trailing slashes ("/" stays "/"), in buf when one is dropped: static storage, like
// the --master address, since the path outlives every copy of the Config (argv may be read-only).
static const char *trim_slashes(const char *p, char *buf, size_t cap, const char *what) {
    size_t n = strlen(p);
    if (n < 2 || p[n - 1] != '/') return p;
    while (n > 1 && p[n - 1] == '/') n--;
    if (n >= cap) ct_die("%s: path longer than %zu bytes", what, cap - 1);
    memcpy(buf, p, n);
    buf[n] = 0;
    return buf;
}

void config_from_args(Config *c, ConfigGiven *given, int argc, char **argv) {
    config_defaults(c);
    memset(given, 0, sizeof *given);
    config_parse_args(c, given, argc, argv);
    if (c->config_file[0]) config_read_file(c, given, c->config_file);
    config_env_aliases(c, given);
    c->argv0 = argc > 0 ? argv[0] : "train";
    // --demo --resume runs/demo: the recorded settings are the demo's already, its data included.
    if (c->demo && !c->resume[0]) config_apply_demo(c, given, argv[0]);
    settings_resume(c, given);  // --resume: the run's recorded settings fill the flags not given
    if (given->resumed_from) c->demo = 0;  // the record holds the demo's settings and data already
    else if (c->demo && c->resume[0]) config_apply_demo(c, given, argv[0]);  // an older checkpoint: no record
    settings_evaluate(c, given);  // --evaluate: the model's own preprocessing
    // --weights RUN_DIR (a run's best model), for training too.
    if (c->weights[0]) c->weights = settings_model_in(c->weights);
    if (!c->shards[0]) ct_die("missing SHARDS directory (or --demo, or --resume RUN_DIR); see train --help");
    if (given->config_file) config_file_blame(given);  // validation errors name FILE:LINE
    config_apply_gpus(c, given);
    config_env_defaults(c, given);
    config_validate(c, given);
    ct_set_error_context(NULL);
    for (int i = 0; i < CONFIG_N_FLAGS; i++) {  // recorded, so a resume resolves them again
        const Flag *fl = &CONFIG_FLAGS[i];
        c->was_auto[i] = fl->type == F_INT && !strcmp(fl->def, "auto") && *(const int *)((const char *)c + fl->offset) == 0;
    }
    if (c->val_crop_size == 0) c->val_crop_size = c->crop_size;
    if (c->val_resize == 0) c->val_resize = config_auto_val_resize(c->val_crop_size);
    if (c->res_start == 0) c->res_start = c->crop_size;
    if (c->res_end == 0) c->res_end = c->crop_size;
    if (c->res_ramp[0]) config_parse_ramp(c->res_ramp, &c->res_ramp_start, &c->res_ramp_end);
    // Paths are joined as DIR/name everywhere; a trailing slash would print as DIR//name.
    static char shards[4096], out[4096], dump[4096];
    c->shards = trim_slashes(c->shards, shards, sizeof shards, "SHARDS");
    c->out = trim_slashes(c->out, out, sizeof out, "--out");
    c->dump_batches = trim_slashes(c->dump_batches, dump, sizeof dump, "--dump-batches");
    if (!c->deterministic) ct_warn("--no-deterministic: the CPU backend is deterministic anyway");
}
