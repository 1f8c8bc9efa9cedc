// trainer/config: flags parse by name in every spelling, the demo recipe yields to flags given,
// --gpus expands, the launchers' environment fills only what flags left open and records where
// each value came from, and the nodes' fingerprint ignores exactly the node-local flags.
// (Bad values die; tests/test_cli.sh checks those messages end to end.)
#include <string.h>

#include "tests/test.h"
#include "trainer/config.h"

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

    // The fingerprint: node-local flags do not change it, anything else does, and so does the data.
    uint64_t data = 42;
    parse(&c, &g, (const char *[]){"s/", NULL});
    uint64_t h0 = config_fingerprint(&c, &data, sizeof data);
    parse(&c, &g, (const char *[]){"-j", "7", "--out", "elsewhere", "-p", "3", "--node-rank", "1", "--cuda-graphs", "off", "s/", NULL});
    CHECK(config_fingerprint(&c, &data, sizeof data) == h0, "node-local flags changed the fingerprint");
    parse(&c, &g, (const char *[]){"--lr", "0.2", "s/", NULL});
    CHECK(config_fingerprint(&c, &data, sizeof data) != h0, "--lr did not change the fingerprint");
    parse(&c, &g, (const char *[]){"s/", NULL});
    data = 43;
    CHECK(config_fingerprint(&c, &data, sizeof data) != h0, "the data did not change the fingerprint");

    // Per-channel lists: one value broadcasts, n values fill n channels.
    float v[3];
    config_parse_floats("mean", "0.5", v, 3);
    CHECK(v[0] == 0.5f && v[2] == 0.5f, "broadcast");
    config_parse_floats("mean", "0.1,0.2,0.3", v, 3);
    CHECK(v[0] == 0.1f && v[1] == 0.2f && v[2] == 0.3f, "list");
    return test_summary("test_config");
}
