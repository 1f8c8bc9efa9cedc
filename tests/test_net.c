// dist/net.h with real processes on localhost (fork): the rendezvous, sums in node order (bit for
// bit, every node the same), broadcasts from any node, barriers, and the errors: nodes that
// disagree on a collective, a refused node, a node that goes away mid-run.
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dist/net.h"
#include "tests/test.h"
#include "util/common.h"
#include "util/rng.h"

static int g_port;

// Node k's data for a collective.
static void fill(float *f, double *d, int64_t *q, size_t n, int node, int round) {
    Rng r = rng_make(77, node, round);
    for (size_t i = 0; i < n; i++) {
        f[i] = (rng_uniform(&r) - 0.5f) * ldexpf(1.f, (int)rng_below(&r, 30) - 15);
        d[i] = (rng_uniform(&r) - 0.5) * ldexp(1., (int)rng_below(&r, 60) - 30);
        q[i] = (int64_t)rng_below(&r, 1u << 30);
    }
}

// Child body: connect as `node`, run the scenario, exit 0 when everything matched.
static int node_main(int nodes, int node, int scenario) {
    const char *same = "--lr\t0.1\n--arch\tresnet18\nrecords\t100\n";
    const char *other = "--lr\t0.07\n--arch\tresnet18\nrecords\t100\n--extra\tx y\n";
    char err[1400];
    NodeNet *net = net_connect(nodes, node, "127.0.0.1", g_port, scenario == 2 && node == 1 ? other : same, 1, 10, err, sizeof err);
    if (scenario == 2) {  // node 1 has other settings: both sides fail, naming each that differs
        if (net) return 10;
        const char *want = "node 1's settings differ from node 0's: --lr: node 1 has 0.07, node 0 has 0.1; "
                           "--extra: node 1 has x y, node 0 has (none); every node must run the same command";
        if (!strstr(err, want)) {
            fprintf(stderr, "node %d: '%s'\n", node, err);
            return 11;
        }
        return node == 0 || strstr(err, "node 0 refused this node") ? 0 : 12;
    }
    if (!net) {
        fprintf(stderr, "node %d: %s\n", node, err);
        return 20;
    }
    if (net_world(net) != nodes || net_rank_offset(net) != node) return 21;
    const size_t n = 1000 + 37;
    float *f = ct_alloc(n * 4), *fr = ct_alloc(n * 4), *ft = ct_alloc(n * 4);
    double *d = ct_alloc(n * 8), *dr = ct_alloc(n * 8), *dt = ct_alloc(n * 8);
    int64_t *q = ct_alloc(n * 8), *qr = ct_alloc(n * 8), *qt = ct_alloc(n * 8);
    int bad = 0;
    for (int round = 0; round < 3 && scenario == 0; round++) {
        fill(fr, dr, qr, n, 0, round);  // the node-order reference
        for (int k = 1; k < nodes; k++) {
            fill(ft, dt, qt, n, k, round);
            for (size_t i = 0; i < n; i++) fr[i] += ft[i], dr[i] += dt[i], qr[i] += qt[i];
        }
        fill(f, d, q, n, node, round);
        if (net_allreduce(net, NET_F32, f, n, err, sizeof err) || net_allreduce(net, NET_F64, d, n, err, sizeof err) ||
            net_allreduce(net, NET_I64, q, n, err, sizeof err) || net_barrier(net, err, sizeof err))
            return 30;
        bad += memcmp(f, fr, n * 4) != 0 || memcmp(d, dr, n * 8) != 0 || memcmp(q, qr, n * 8) != 0;
        int root = round % nodes;
        char msg[64];
        snprintf(msg, sizeof msg, "from node %d", node);
        if (net_broadcast(net, msg, sizeof msg, root, err, sizeof err)) return 31;
        char want[64];
        snprintf(want, sizeof want, "from node %d", root);
        bad += strcmp(msg, want) != 0;
    }
    if (scenario == 1) {  // node 2 calls a broadcast where the others call an allreduce
        int rc = node == 2 ? net_broadcast(net, f, 8, 0, err, sizeof err) : net_allreduce(net, NET_F32, f, 2, err, sizeof err);
        if (rc == 0) return 40;
        if (!strstr(err, "nodes disagree on a collective: node 0 called allreduce #1 (8 bytes), node 2 called broadcast #1")) {
            fprintf(stderr, "node %d: %s\n", node, err);
            return 41;
        }
    }
    if (scenario == 3) {  // node 1 leaves after the rendezvous; node 0's next collective names it
        if (node == 1) _exit(0);
        int rc = net_allreduce(net, NET_F32, f, n, err, sizeof err);
        if (node == 0 && (rc == 0 || !strstr(err, "node 1 closed the connection"))) {
            fprintf(stderr, "node 0: rc %d '%s'\n", rc, err);
            return 50;
        }
    }
    net_close(net);
    return bad ? 60 : 0;
}

static void run_scenario(int nodes, int scenario, const char *what) {
    pid_t pid[8];
    for (int k = 0; k < nodes; k++) {
        pid[k] = fork();
        if (pid[k] == 0) _exit(node_main(nodes, k, scenario));
    }
    int fails = 0;
    for (int k = 0; k < nodes; k++) {
        int st = 0;
        waitpid(pid[k], &st, 0);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        if (code) {
            fprintf(stderr, "%s: node %d exited %d\n", what, k, code);
            fails++;
        }
    }
    CHECK(fails == 0, "%s: %d node(s) failed", what, fails);
    g_port++;
}

static void test_first_host(void) {
    const char *in[] = {"gpu[07-09,12],cpu3", "a,b", "single", "n[1-2]-ib,m", "x[003]", "rack1-n[10-20]"};
    const char *want[] = {"gpu07", "a", "single", "n1-ib", "x003", "rack1-n10"};
    char out[64];
    for (size_t i = 0; i < CT_ARRAY_LEN(in); i++)
        CHECK(net_first_host(in[i], out, sizeof out) == 0 && !strcmp(out, want[i]), "first host of '%s': '%s'", in[i], out);
    const char *bad[] = {"", "n[", "n[a-b]", "[1-2", "n[1-2"};
    for (size_t i = 0; i < CT_ARRAY_LEN(bad); i++) CHECK(net_first_host(bad[i], out, sizeof out) == -1, "'%s' accepted", bad[i]);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    test_first_host();
    g_port = 30000 + (int)(getpid() % 20000);
    run_scenario(2, 0, "2 nodes: sums, broadcasts, barriers");
    run_scenario(3, 0, "3 nodes: sums, broadcasts, barriers");
    run_scenario(3, 1, "3 nodes: a node calls another collective");
    run_scenario(2, 2, "2 nodes: node 1 with other settings");
    run_scenario(2, 3, "2 nodes: node 1 goes away");
    return test_summary("test_net");
}
