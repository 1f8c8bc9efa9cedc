// trainer/config: flags parse by name in every spelling, the demo recipe yields to flags given,
// --gpus expands, the launchers' environment fills only what flags left open and records where
// each value came from, and the settings nodes compare leave out exactly the node-local flags.
// (Bad values die; tests/test_cli.sh checks those messages end to end.)
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/test.h"
#include "trainer/args.h"
#include "trainer/config.h"
#include "trainer/settings.h"

static void parse(Config *c, ConfigGiven *g, const char **args) {
    int n = 0;
    const char *argv[64] = {"train"};
    while (args[n]) { argv[n + 1] = args[n]; n++; }
    config_defaults(c);
    memset(g, 0, sizeof *g);
    config_parse_args(c, g, n + 1, (char **)argv);
}

static void clear_env(void) {
    const char *vars[] = {"WORLD_SIZE", "SLURM_NNODES", "NODE_RANK", "RANK", "SLURM_NODEID", "MASTER_ADDR", "MASTER_PORT",
                          "SLURM_JOB_NODELIST", "SLURM_NODELIST"};
    for (size_t i = 0; i < CT_ARRAY_LEN(vars); i++) unsetenv(vars[i]);
}

int main(void) {
    clear_env();
    Config c;
    ConfigGiven g;

    // Defaults come from the table, as --help shows them.
    parse(&c, &g, (const char *[]){"shards/", NULL});
    CHECK(!strcmp(c.arch, "resnet18") && c.epochs == 90 && c.batch == 256 && c.lr == 0.1 && c.wd == 1e-4, "defaults");
    CHECK(!strcmp(c.shards, "shards/") && !config_given(&g, "arch"), "positional and nothing given");
    CHECK(config_flag("arch")->short_name == 'a' && config_flag("batch-size")->short_name == 'b', "flags by name");

    // Every spelling of a value, and --no-X for booleans.
    parse(&c, &g, (const char *[]){"-a", "resnet50", "-b64", "--lr=0.25", "--epochs", "3", "--nesterov", "--no-deterministic",
                                   "x/", NULL});
    CHECK(!strcmp(c.arch, "resnet50") && c.batch == 64 && c.lr == 0.25 && c.epochs == 3, "values");
    CHECK(c.nesterov == 1 && c.deterministic == 0, "booleans");
    CHECK(config_given(&g, "arch") && config_given(&g, "batch-size") && config_given(&g, "deterministic") &&
              !config_given(&g, "wd"), "given flags recorded by name");

    // The demo recipe fills what was not given; a flag given wins.
    const char *demo[] = {"train", "--demo", "--epochs", "1", NULL};
    config_from_args(&c, &g, 4, (char **)demo);
    CHECK(!strcmp(c.arch, "resnet20") && c.epochs == 1 && c.batch == 128 && c.lr == 0.2, "demo recipe under a flag");
    CHECK(!strcmp(c.shards, DEMO_SHARDS) && !strcmp(c.device, "cpu") && c.crop_size == 28, "demo data and device");

    // --val-resize auto is int(crop / 0.875), resolved once --crop-size is known; a value given stays.
    const char *vr_default[] = {"train", "s/", NULL};
    config_from_args(&c, &g, 2, (char **)vr_default);
    CHECK(c.val_resize == 256 && !strcmp(config_flag("val-resize")->def, "auto"), "--val-resize auto at 224: %d", c.val_resize);
    const char *vr_32[] = {"train", "--crop-size", "32", "s/", NULL};
    config_from_args(&c, &g, 4, (char **)vr_32);
    CHECK(c.val_resize == 36, "--val-resize auto at 32: %d", c.val_resize);
    const char *vr_given[] = {"train", "--crop-size", "32", "--val-resize", "40", "s/", NULL};
    config_from_args(&c, &g, 6, (char **)vr_given);
    CHECK(c.val_resize == 40, "--val-resize 40 given: %d", c.val_resize);
    const char *vr_auto[] = {"train", "--crop-size", "64", "--val-resize=auto", "s/", NULL};
    config_from_args(&c, &g, 5, (char **)vr_auto);
    CHECK(c.val_resize == 73, "--val-resize auto given at 64: %d", c.val_resize);
    CHECK(c.val_resize == config_auto_val_resize(64), "config_auto_val_resize");
    // SHARDS and --out lose trailing slashes, so SHARDS/val.shard never reads SHARDS//val.shard.
    const char *slashes[] = {"train", "--out", "o//", "sh/", NULL};
    config_from_args(&c, &g, 4, (char **)slashes);
    CHECK(!strcmp(c.shards, "sh") && !strcmp(c.out, "o"), "trailing slashes: '%s' '%s'", c.shards, c.out);

    // --gpus N is --device cuda --ranks N.
    const char *gpus[] = {"train", "--gpus", "4", "s/", NULL};
    config_from_args(&c, &g, 4, (char **)gpus);
    CHECK(c.ranks == 4 && !strcmp(c.device, "cuda"), "--gpus");

    // torchrun's environment fills --nodes/--node-rank/--master, and the source is remembered.
    setenv("WORLD_SIZE", "3", 1);
    setenv("RANK", "2", 1);
    setenv("MASTER_ADDR", "node0", 1);
    setenv("MASTER_PORT", "1234", 1);
    parse(&c, &g, (const char *[]){"s/", NULL});
    config_env_defaults(&c, &g);
    CHECK(c.nodes == 3 && c.node_rank == 2 && !strcmp(c.master, "node0:1234"), "torchrun env: %d %d %s", c.nodes, c.node_rank,
          c.master);
    CHECK(!strcmp(g.nodes_from, "WORLD_SIZE") && !strcmp(g.node_rank_from, "RANK") && !strcmp(g.master_from, "MASTER_ADDR"),
          "sources named");
    char host[256];
    int port = 0;
    config_master(&c, &g, host, sizeof host, &port);
    CHECK(!strcmp(host, "node0") && port == 1234, "master split: %s %d", host, port);
    // Flags given beat the environment.
    parse(&c, &g, (const char *[]){"--nodes", "2", "--node-rank", "1", "--master", "h:99", "s/", NULL});
    config_env_defaults(&c, &g);
    CHECK(c.nodes == 2 && c.node_rank == 1 && !strcmp(c.master, "h:99") && !strcmp(g.nodes_from, "--nodes"), "flags win");
    clear_env();
    // SLURM: node 0 is the first host of the node list.
    setenv("SLURM_NNODES", "2", 1);
    setenv("SLURM_NODEID", "1", 1);
    setenv("SLURM_JOB_NODELIST", "gpu[07-08]", 1);
    parse(&c, &g, (const char *[]){"s/", NULL});
    config_env_defaults(&c, &g);
    CHECK(c.nodes == 2 && c.node_rank == 1 && !strcmp(c.master, "gpu07:29500"), "slurm env: %s", c.master);
    clear_env();

    // What nodes compare: node-local flags are not in it, anything else is, by name.
    parse(&c, &g, (const char *[]){"s/", NULL});
    char *t0 = settings_node_text(&c);
    CHECK(strstr(t0, "--lr\t0.1\n") && strstr(t0, "--conv-engine\tv2\n") && strstr(t0, "--cpu-winograd\ton\n"),
          "settings text: %.200s", t0);
    parse(&c, &g, (const char *[]){"-j", "7", "--out", "elsewhere", "-p", "3", "--node-rank", "1", "--cuda-graphs", "off", "s/", NULL});
    char *t1 = settings_node_text(&c);
    CHECK(!strcmp(t0, t1), "node-local flags changed the settings text");
    CHECK(!strstr(t1, "--out\t") && !strstr(t1, "--workers\t"), "node-local flags listed");
    parse(&c, &g, (const char *[]){"--lr", "0.2", "--teacher", "a\tb\nc", "s/", NULL});
    char *t2 = settings_node_text(&c);
    CHECK(strstr(t2, "--lr\t0.2\n") && strstr(t2, "--teacher\ta\\tb\\nc\n"), "--lr / escapes: %.300s", t2);
    free(t0), free(t1), free(t2);

    // --workers: "auto" (stored as 0 until the backend is known) or a count.
    parse(&c, &g, (const char *[]){"s/", NULL});
    CHECK(c.workers == 0 && !strcmp(config_flag("workers")->def, "auto"), "--workers defaults to auto");
    parse(&c, &g, (const char *[]){"-j", "auto", "-j3", "s/", NULL});
    CHECK(c.workers == 3, "-j 3 after -j auto");
    // The rule: on cuda the cores less a launching thread per rank, shared by the ranks; on the
    // cpu, OpenMP owns the cores and the loader takes 1 or 2 a rank.
    CHECK(config_workers_auto(16, 1, 1) == 15 && config_workers_auto(16, 4, 1) == 3 && config_workers_auto(16, 8, 1) == 1,
          "auto on cuda");
    CHECK(config_workers_auto(2, 8, 1) == 1 && config_workers_auto(256, 1, 1) == 32, "auto on cuda: at least 1, at most 32");
    CHECK(config_workers_auto(16, 1, 0) == 2 && config_workers_auto(16, 4, 0) == 1 && config_workers_auto(2, 1, 0) == 1,
          "auto on cpu");
    CHECK(config_cpus_available() >= 1, "cpus available");

    // --config FILE: defaults < demo < file < command line; every spelling; comments.
    char dir[] = "/tmp/ctrain_config_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char rp[256];
    snprintf(rp, sizeof rp, "%s/r.conf", dir);
    const char *recipe = "# a recipe\n\n--epochs 16\n--lr=0.7   # peak\n  --nesterov\n--no-flip off\n"
                         "--out runs/#1\n--label-smoothing 0.1\r\n--batch-size 64\n";
    test_write_file(rp, recipe, strlen(recipe));
    const char *withfile[] = {"train", "--config", rp, "-b", "32", "s/", NULL};
    config_from_args(&c, &g, 6, (char **)withfile);
    CHECK(c.epochs == 16 && c.lr == 0.7 && c.nesterov == 1 && c.no_flip == 0 && c.label_smoothing == 0.1, "file values");
    CHECK(!strcmp(c.out, "runs/#1"), "a '#' inside a value is not a comment: %s", c.out);
    CHECK(c.batch == 32, "the command line wins over the file: %d", c.batch);
    CHECK(config_given(&g, "epochs") && g.config_line[config_flag("epochs") - CONFIG_FLAGS] == 3 &&
              g.config_line[config_flag("lr") - CONFIG_FLAGS] == 4 && g.config_line[config_flag("batch-size") - CONFIG_FLAGS] == 0,
          "file lines recorded (a command-line flag has none)");
    CHECK(!strcmp(g.config_file, rp) && c.wd == 1e-4, "file named; defaults kept");
    const char *demofile[] = {"train", "--demo", "--config", rp, "--lr", "0.05", NULL};
    config_from_args(&c, &g, 6, (char **)demofile);
    CHECK(c.epochs == 16 && c.batch == 64 && c.lr == 0.05 && !strcmp(c.arch, "resnet20") && c.crop_size == 28,
          "demo < file < command line: %d %d %g %s", c.epochs, c.batch, c.lr, c.arch);

    // Every shipped recipe parses and validates, so none rots when flags change.
    const char *root = getenv("CTRAIN_ROOT");
    char rdir[1024];
    snprintf(rdir, sizeof rdir, "%s/recipes", root && *root ? root : ".");
    DIR *d = opendir(rdir);
    CHECK(d != NULL, "no %s", rdir);
    int nrecipes = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".conf")) continue;
        char path[1300];
        snprintf(path, sizeof path, "%s/%s", rdir, e->d_name);
        const char *args[] = {"train", "--config", path, "s/", NULL};
        config_from_args(&c, &g, 4, (char **)args);  // dies naming FILE:LINE on a stale flag
        CHECK(config_given(&g, "arch") && config_given(&g, "epochs") && config_given(&g, "lr") &&
                  config_given(&g, "lr-schedule") && config_given(&g, "batch-size"),
              "%s: a recipe names its architecture, epochs, batch and schedule", e->d_name);
        if (!strncmp(e->d_name, "ffcv_", 5))
            CHECK(c.res_start == 160 && c.res_end == 192 && c.res_ramp_end > c.res_ramp_start && c.res_ramp_end < c.epochs &&
                      c.val_crop_size == 256 && c.val_resize == 292 && !strcmp(c.tta, "flip"),
                  "%s: FFCV's 160->192 ramp, eval at 256 with the 224/256 ratio, flip TTA", e->d_name);
        if (!strncmp(e->d_name, "timm_rsb_a", 10)) {  // the paper's Table 1: stochastic depth 0.05 in A1/A2, none in A3
            CHECK(c.drop_path == (e->d_name[10] == '3' ? 0.0 : 0.05), "%s: --drop-path %g", e->d_name, c.drop_path);
            CHECK(c.bce && c.bce_target_thresh == 0.2 && c.label_smoothing == 0, "%s: BCE, target threshold 0.2, no smoothing",
                  e->d_name);
        }
        nrecipes++;
    }
    if (d) closedir(d);
    CHECK(nrecipes >= 13, "found %d recipes in %s", nrecipes, rdir);
    unlink(rp);
    rmdir(dir);

    // Progressive resizing, eval's size and TTA: autos follow --crop-size; --val-resize follows
    // --val-crop-size; the ramp is parsed.
    const char *res_auto[] = {"train", "--crop-size", "64", "s/", NULL};
    config_from_args(&c, &g, 4, (char **)res_auto);
    CHECK(c.res_start == 64 && c.res_end == 64 && c.val_crop_size == 64 && c.val_resize == 73 && !strcmp(c.tta, "none") &&
              c.res_step == 32, "res autos: %d %d %d %d", c.res_start, c.res_end, c.val_crop_size, c.val_resize);
    const char *res_ffcv[] = {"train", "--crop-size", "192", "--res-start", "160", "--res-ramp", "65,76",
                              "--val-crop-size", "256", "--tta", "flip", "s/", NULL};
    config_from_args(&c, &g, 12, (char **)res_ffcv);
    CHECK(c.res_start == 160 && c.res_end == 192 && c.res_ramp_start == 65 && c.res_ramp_end == 76 && c.val_crop_size == 256 &&
              c.val_resize == 292 && !strcmp(c.tta, "flip"),
          "FFCV's flags: %d %d %d,%d val %d/%d", c.res_start, c.res_end, c.res_ramp_start, c.res_ramp_end, c.val_crop_size,
          c.val_resize);
    int e0 = -1, e1 = -1;
    CHECK(config_parse_ramp("3,7", &e0, &e1) == 0 && e0 == 3 && e1 == 7, "ramp 3,7");
    CHECK(config_parse_ramp("3", &e0, &e1) && config_parse_ramp("3,", &e0, &e1) && config_parse_ramp("a,4", &e0, &e1) &&
              config_parse_ramp("1,2,3", &e0, &e1) && config_parse_ramp("-1,2", &e0, &e1),
          "malformed ramps refused");
    // The schedule against FFCV's get_resolution (np.interp, then np.round(res / step) * step), whose
    // values for these settings were computed with numpy: np.round is half-to-even, so 144 = 4.5 x 32
    // goes down to 128 and 176 = 5.5 x 32 up to 192.
    ResSchedule rs;
    config_res_schedule(&c, &rs);
    for (int e = 60; e < 80; e++)
        CHECK(res_schedule_at(&rs, e) == (e <= 70 ? 160 : 192), "rn50_88 epoch %d: %d", e, res_schedule_at(&rs, e));
    ResSchedule wide = {128, 256, 10, 18, 32};
    const int want[] = {128, 128, 128, 128, 160, 192, 192, 192, 224, 256, 256, 256};  // epochs 8..19
    for (int e = 8; e < 20; e++)
        CHECK(res_schedule_at(&wide, e) == want[e - 8], "128->256 epoch %d: %d, numpy %d", e, res_schedule_at(&wide, e), want[e - 8]);
    CHECK(res_schedule_max(&wide) == 256, "max");
    ResSchedule down = {32, 16, 0, 2, 8};
    CHECK(res_schedule_at(&down, 0) == 32 && res_schedule_at(&down, 1) == 24 && res_schedule_at(&down, 2) == 16 &&
              res_schedule_max(&down) == 32, "a ramp down");

    // Per-channel lists: one value broadcasts, n values fill n channels.
    float v[3];
    config_parse_floats("mean", "0.5", v, 3);
    CHECK(v[0] == 0.5f && v[2] == 0.5f, "broadcast");
    config_parse_floats("mean", "0.1,0.2,0.3", v, 3);
    CHECK(v[0] == 0.1f && v[1] == 0.2f && v[2] == 0.3f, "list");
    return test_summary("test_config");
}
