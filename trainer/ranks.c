// Nodes, rank threads, gradient averagers and the replica check (trainer/ranks.h).
#include "trainer/ranks.h"

#include <omp.h>
#include <pthread.h>
#include <string.h>

#include "trainer/loop.h"
#include "trainer/settings.h"
#include "util/common.h"

// What every node must agree on: the settings, and the dataset as this node sees it.
static char *node_settings(const Config *c, const Dataset *d) {
    char *flags = settings_node_text(c);
    size_t n = strlen(flags);
    char *t = ct_alloc(n + 200);
    snprintf(t, n + 200, "%sthe dataset's class table (hash)\t%016llx\nthe train shard's records\t%llu\n"
             "the val shard's records\t%llu\n", flags, (unsigned long long)d->class_hash,
             (unsigned long long)d->train.n_records, (unsigned long long)d->val.n_records);
    free(flags);
    return t;
}

void ranks_create(Ranks *rs, const Config *c, const ConfigGiven *given, const Dataset *d, BackendKind kind) {
    memset(rs, 0, sizeof *rs);
    rs->local = c->ranks;
    rs->world = rs->local;
    if (rs->local > 1 || c->nodes > 1) rs->group = comm_group_create(rs->local, c->timeout);
    if (c->nodes > 1) {
        char host[256], err[1400];
        int port;
        config_master(c, given, host, sizeof host, &port);
        if (c->node_rank == 0) fprintf(stderr, "train: node 0 of %d waiting on port %d for the other nodes\n", c->nodes, port);
        char *settings = node_settings(c, d);
        rs->net = net_connect(c->nodes, c->node_rank, host, port, settings, rs->local, c->timeout, err, sizeof err);
        free(settings);
        if (!rs->net) ct_die("--nodes %d, node %d: %s", c->nodes, c->node_rank, err);
        comm_group_set_net(rs->group, rs->net);
        rs->offset = net_rank_offset(rs->net);
        rs->world = net_world(rs->net);
        fprintf(stderr, "train: node %d of %d: ranks %d..%d of %d\n", c->node_rank, c->nodes, rs->offset,
                rs->offset + rs->local - 1, rs->world);
    }
    if (d->have_train) backend_pin_shard(kind, &d->train);  // mapped once, shared by this node's ranks
    backend_pin_shard(kind, &d->val);
    rs->runs = ct_zalloc(rs->local * sizeof(Run));
    for (int k = 0; k < rs->local; k++)
        run_setup(&rs->runs[k], c, d, kind, rs->offset + k, rs->world, k, rs->group ? comm_group_rank(rs->group, k) : NULL);
    if (c->evaluate || rs->world == 1) return;
    rs->backend_group = backend_group_create(kind, c->comm, rs->local, rs->offset, rs->world, rs->net);
    for (int k = 0; k < rs->local; k++)
        backend_attach_gradsync(rs->runs[k].model.backend, rs->backend_group, rs->runs[k].rank.comm, k,
                                (size_t)c->bucket_mb << 20);
}

void ranks_destroy(Ranks *rs) {
    for (int k = 0; k < rs->local; k++) run_teardown(&rs->runs[k]);
    free(rs->runs);
    rs->runs = NULL;
}

int ranks_lead(const Ranks *rs) { return rs->offset == 0; }

typedef struct {
    Run *r;
    int omp_threads;
    int evaluate_only;
    int rc;
    EvalResult eval;
} RankThread;

static void *rank_thread(void *arg) {
    RankThread *t = arg;
    omp_set_num_threads(t->omp_threads);
    backend_bind_thread(t->r->model.backend);  // the device is per host thread
    if (t->evaluate_only) t->eval = step_evaluate(t->r, 0);
    else t->rc = loop_train(t->r, &t->eval);
    return NULL;
}

int ranks_run(Ranks *rs, int evaluate_only, EvalResult *eval0) {
    int n = rs->local;
    int omp = CT_MAX(1, omp_get_max_threads() / n);
    RankThread *t = ct_zalloc(n * sizeof *t);
    pthread_t *th = ct_zalloc(n * sizeof *th);
    for (int k = 0; k < n; k++) t[k] = (RankThread){&rs->runs[k], omp, evaluate_only, 0, {0, 0, 0, 0}};
    for (int k = 1; k < n; k++)
        if (pthread_create(&th[k], NULL, rank_thread, &t[k])) ct_die("--ranks %d: cannot start rank %d's thread", n, k);
    rank_thread(&t[0]);
    for (int k = 1; k < n; k++) pthread_join(th[k], NULL);
    int rc = t[0].rc;
    *eval0 = t[0].eval;
    free(t);
    free(th);
    return rc;
}
