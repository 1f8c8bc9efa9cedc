// The lowered execution plan (nn/plan.h) of resnet18, resnet20, resnet50 and a BlurPool resnet20:
// - which fusions each model gets by default, named (the stem's BN in the max pool, a downsampling
//   block's bn2 applied by its tail, the next block's conv1 doing the tail's backward reductions),
//   and the counts of every step kind and fusion;
// - each option off removes its fusion and those that ride on it, and nothing else;
// - for every combination of the fusion options, the plan is well formed: every graph op in
//   exactly one step, in graph order; a step reads only the input, a slot an earlier step wrote, or
//   a slot it applies on the fly (a tail's residual BN, a pool's BN); a slot without a buffer is
//   never written nor read by a plain step; gradients exist wherever a stored output feeds backward.
#include <string.h>

#include "nn/plan.h"
#include "nn/resnet.h"
#include "tests/test.h"

typedef struct {
    int kinds[PLAN_KINDS];
    int fwd_stats, bwd_bn, bwd_tail, residual_bn, pool_bn, tail_mask, no_act;
} Counts;

static Counts count(const ExecPlan *p) {
    Counts c;
    memset(&c, 0, sizeof c);
    for (int k = 0; k < p->n_steps; k++) {
        const PlanStep *s = &p->steps[k];
        c.kinds[s->kind]++;
        c.fwd_stats += s->fwd_stats >= 0;
        c.bwd_bn += s->bwd_bn >= 0;
        c.bwd_tail += s->bwd_tail >= 0;
        c.residual_bn += s->residual_bn >= 0;
        c.pool_bn += s->pool_bn >= 0;
        c.tail_mask += s->tail_mask;
    }
    for (int s = 0; s < p->n_slots; s++) c.no_act += p->no_act[s];
    return c;
}

static const PlanStep *step_named(const ExecPlan *p, const ResNet *m, const char *name) {
    for (int i = 0; i < m->n_ops; i++)
        if (!strcmp(m->ops[i].name, name)) return plan_step_of(p, i);
    ct_die("test_plan: no op %s in %s", name, m->arch);
    return NULL;
}
static const char *op_name(const ResNet *m, int i) { return i >= 0 ? m->ops[i].name : "-"; }

// Structural invariants of any plan.
static void check_well_formed(const ExecPlan *p, const ResNet *m, const char *tag) {
    int prev = -1, covered = 0;
    uint8_t *written = (uint8_t *)ct_zalloc((size_t)m->n_tensors);
    written[0] = 1;  // the input
    for (int k = 0; k < p->n_steps; k++) {
        const PlanStep *s = &p->steps[k];
        CHECK(s->op > prev, "%s: step %d (op %d) out of graph order", tag, k, s->op);
        prev = s->op;
        covered += 1 + (s->add >= 0);
        CHECK(p->step_of_op[s->op] == k && (s->add < 0 || (s->add == s->op + 1 && p->step_of_op[s->add] == k)),
              "%s: step %d's ops do not map back to it", tag, k);
        int reads[2] = {s->in, s->res};
        for (int j = 0; j < 2; j++) {
            int r = reads[j];
            if (r < 0) continue;
            int on_the_fly = (s->residual_bn >= 0 && m->ops[s->residual_bn].out == r) ||
                             (s->pool_bn >= 0 && m->ops[s->pool_bn].out == r);
            CHECK(written[r] || (on_the_fly && p->no_act[r]), "%s: step %d (%s %s) reads slot %d before any step writes it",
                  tag, k, plan_kind_name(s->kind), m->ops[s->op].name, r);
        }
        CHECK(!p->no_act[s->out] || s->kind == PLAN_BN_STATS, "%s: step %d (%s) writes slot %d, which has no buffer", tag,
              k, m->ops[s->op].name, s->out);
        if (s->kind != PLAN_BN_STATS) written[s->out] = 1;
        if (s->kind == PLAN_BN_STATS) {  // its output is read only by the step that applies it
            int appliers = 0;
            for (int q = 0; q < p->n_steps; q++)
                appliers += p->steps[q].residual_bn == s->op || p->steps[q].pool_bn == s->op;
            CHECK(appliers == 1, "%s: stats-only %s is applied by %d steps", tag, m->ops[s->op].name, appliers);
        }
        if (s->bwd_bn >= 0)
            CHECK(m->ops[s->bwd_bn].out == s->in && m->ops[s->bwd_bn].relu, "%s: %s's bwd_bn %s is not its relu(bn) input",
                  tag, m->ops[s->op].name, op_name(m, s->bwd_bn));
        if (s->bwd_tail >= 0) {
            const PlanStep *t = plan_step_of(p, s->bwd_tail);
            CHECK(t->kind == PLAN_BN_ADD && t->out == s->in && t->tail_mask && k == p->step_of_op[s->bwd_tail] + 1,
                  "%s: %s's bwd_tail %s is not the tail right before it", tag, m->ops[s->op].name, op_name(m, s->bwd_tail));
        }
        if (s->fwd_stats >= 0)
            CHECK(s->kind == PLAN_CONV && m->ops[s->fwd_stats].in == s->out && p->step_of_op[s->fwd_stats] == k + 1,
                  "%s: %s's statistics epilogue is not for the BN right after it", tag, m->ops[s->op].name);
    }
    CHECK(covered == m->n_ops, "%s: the steps cover %d of %d ops", tag, covered, m->n_ops);
    CHECK(written[m->n_tensors - 1], "%s: no step writes the logits", tag);
    for (int t = 1; t < m->n_tensors - 1; t++)
        CHECK(written[t] || p->no_act[t], "%s: slot %d is neither written nor left without a buffer", tag, t);
    free(written);
}

static ExecOptions opts_off(const char *which) {
    ExecOptions o = exec_options_default();
    if (!strcmp(which, "add")) o.fuse_bn_add = 0;
    else if (!strcmp(which, "stats")) o.fuse_bn_stats = 0;
    else if (!strcmp(which, "bwd")) o.fuse_bn_bwd = 0;
    else if (!strcmp(which, "pool")) o.fuse_bn_pool = 0;
    else if (!strcmp(which, "res")) o.fuse_bn_res = 0;
    else if (!strcmp(which, "all")) o.fuse_bn_add = o.fuse_bn_stats = o.fuse_bn_bwd = o.fuse_bn_pool = o.fuse_bn_res = 0;
    return o;
}

int main(void) {
    // resnet18: 20 convs, 20 BNs, 8 blocks (3 downsampling), the stem's max pool.
    {
        ResNet *m = resnet_create("resnet18", 3, 10);
        ExecPlan *p = plan_build(m, NULL);
        if (getenv("TEST_PLAN_PRINT")) plan_print(p, m, stdout);
        Counts c = count(p);
        CHECK(c.kinds[PLAN_CONV] == 20 && c.kinds[PLAN_BN_ADD] == 8 && c.kinds[PLAN_ADD] == 0,
              "resnet18: %d conv, %d bn_add, %d add steps (want 20, 8, 0)", c.kinds[PLAN_CONV], c.kinds[PLAN_BN_ADD],
              c.kinds[PLAN_ADD]);
        // 4 stats-only BNs: the stem's (in the pool) and each downsampling block's bn2 (in its tail).
        CHECK(c.kinds[PLAN_BN_STATS] == 4 && c.kinds[PLAN_BN] == 8, "resnet18: %d bn_stats, %d bn (want 4, 8)",
              c.kinds[PLAN_BN_STATS], c.kinds[PLAN_BN]);
        CHECK(c.fwd_stats == 20, "resnet18: %d convs gather BN statistics (want all 20)", c.fwd_stats);
        CHECK(c.bwd_bn == 9 && c.bwd_tail == 7 && c.tail_mask == 7, "resnet18: bwd_bn %d, bwd_tail %d, masks %d (want 9, 7, 7)",
              c.bwd_bn, c.bwd_tail, c.tail_mask);
        CHECK(c.residual_bn == 3 && c.pool_bn == 1 && c.no_act == 12, "resnet18: residual_bn %d, pool_bn %d, no_act %d (want 3, 1, 12)",
              c.residual_bn, c.pool_bn, c.no_act);
        const PlanStep *pool = step_named(p, m, "maxpool"), *t = step_named(p, m, "layer2.0.downsample.1");
        CHECK(pool->kind == PLAN_MAXPOOL && !strcmp(op_name(m, pool->pool_bn), "bn1") && pool->bwd_bn == pool->pool_bn,
              "resnet18: the max pool applies %s (want bn1)", op_name(m, pool->pool_bn));
        CHECK(t->kind == PLAN_BN_ADD && !strcmp(op_name(m, t->residual_bn), "layer2.0.bn2"),
              "resnet18: layer2.0's tail is %s on %s with residual BN %s (want bn_add, layer2.0.bn2)",
              plan_kind_name(t->kind), m->ops[t->op].name, op_name(m, t->residual_bn));
        const PlanStep *c1 = step_named(p, m, "layer2.0.conv1");
        CHECK(!strcmp(op_name(m, c1->bwd_tail), "layer1.1.bn2"), "resnet18: layer2.0.conv1 does the backward of %s (want layer1.1.bn2)",
              op_name(m, c1->bwd_tail));
        CHECK(plan_op_folded(p, t->add) && plan_step_of(p, t->add) == t, "resnet18: the tail's ADD is not folded into it");
        check_well_formed(p, m, "resnet18 default");

        // One option off: its fusion and those riding on it go, nothing else.
        struct {
            const char *off;
            int bn_add, bn_stats, fwd_stats, bwd_bn, bwd_tail, residual_bn, pool_bn;
        } want[] = {
            {"add", 0, 1, 20, 9, 0, 0, 1},     // no tails: no residual BN, no tail backward
            {"stats", 8, 4, 0, 9, 7, 3, 1},
            {"bwd", 8, 3, 20, 0, 0, 3, 0},     // the pool's BN rides on the backward epilogue
            {"pool", 8, 3, 20, 9, 7, 3, 0},
            {"res", 8, 1, 20, 9, 7, 0, 1},
            {"all", 0, 0, 0, 0, 0, 0, 0},
        };
        for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
            ExecOptions o = opts_off(want[w].off);
            ExecPlan *q = plan_build(m, &o);
            Counts d = count(q);
            CHECK(d.kinds[PLAN_BN_ADD] == want[w].bn_add && d.kinds[PLAN_BN_STATS] == want[w].bn_stats &&
                      d.fwd_stats == want[w].fwd_stats && d.bwd_bn == want[w].bwd_bn && d.bwd_tail == want[w].bwd_tail &&
                      d.residual_bn == want[w].residual_bn && d.pool_bn == want[w].pool_bn,
                  "resnet18, %s off: bn_add %d bn_stats %d fwd_stats %d bwd_bn %d bwd_tail %d residual_bn %d pool_bn %d "
                  "(want %d %d %d %d %d %d %d)",
                  want[w].off, d.kinds[PLAN_BN_ADD], d.kinds[PLAN_BN_STATS], d.fwd_stats, d.bwd_bn, d.bwd_tail,
                  d.residual_bn, d.pool_bn, want[w].bn_add, want[w].bn_stats, want[w].fwd_stats, want[w].bwd_bn,
                  want[w].bwd_tail, want[w].residual_bn, want[w].pool_bn);
            CHECK(d.kinds[PLAN_ADD] == 8 - d.kinds[PLAN_BN_ADD], "resnet18, %s off: %d add steps beside %d tails", want[w].off,
                  d.kinds[PLAN_ADD], d.kinds[PLAN_BN_ADD]);
            plan_free(q);
        }
        // The conv engine and the CPU routes do not change the plan.
        ExecOptions o = exec_options_default();
        o.conv_engine = EXEC_CONV_WGMMA;
        o.cpu_winograd = o.cpu_small = 0;
        ExecPlan *q = plan_build(m, &o);
        CHECK(q->n_steps == p->n_steps && !memcmp(q->steps, p->steps, (size_t)p->n_steps * sizeof(PlanStep)),
              "resnet18: the conv engine or a CPU route changed the plan");
        plan_free(q);
        plan_free(p);
        resnet_free(m);
    }
    // resnet20: no max pool, 2 downsampling blocks of 9.
    {
        ResNet *m = resnet_create("resnet20", 3, 10);
        ExecPlan *p = plan_build(m, NULL);
        Counts c = count(p);
        CHECK(c.kinds[PLAN_BN_ADD] == 9 && c.kinds[PLAN_BN_STATS] == 2 && c.residual_bn == 2 && c.pool_bn == 0 &&
                  c.bwd_bn == 9 && c.bwd_tail == 8 && c.fwd_stats == 21,
              "resnet20: bn_add %d bn_stats %d residual_bn %d pool_bn %d bwd_bn %d bwd_tail %d fwd_stats %d "
              "(want 9 2 2 0 9 8 21)",
              c.kinds[PLAN_BN_ADD], c.kinds[PLAN_BN_STATS], c.residual_bn, c.pool_bn, c.bwd_bn, c.bwd_tail, c.fwd_stats);
        plan_free(p);
        resnet_free(m);
    }
    // resnet20 with stochastic depth: a drop_path step on each branch but the first block's (p = 0
    // there: timm's rule), so that block keeps its fused tail, the two downsampling blocks keep the
    // shortcut's BN fused with the ADD (its residual, the scaled branch, is no BN's output: no
    // residual_bn), and the other six add the scaled branch in a plain ADD step.
    {
        ResNet *m = resnet_create_dp("resnet20", 3, 10, 0, 0.1);
        ExecPlan *p = plan_build(m, NULL);
        Counts c = count(p);
        CHECK(c.kinds[PLAN_DROP_PATH] == 8 && c.kinds[PLAN_BN_ADD] == 3 && c.kinds[PLAN_ADD] == 6 && c.residual_bn == 0,
              "resnet20 --drop-path: drop_path %d bn_add %d add %d residual_bn %d (want 8 3 6 0)", c.kinds[PLAN_DROP_PATH],
              c.kinds[PLAN_BN_ADD], c.kinds[PLAN_ADD], c.residual_bn);
        const PlanStep *t = step_named(p, m, "layer1.0.bn2"), *d = step_named(p, m, "layer3.2.drop_path");
        CHECK(t && t->kind == PLAN_BN_ADD, "resnet20 --drop-path: layer1.0's tail is not fused (its rate is 0)");
        CHECK(d && d->kind == PLAN_DROP_PATH && m->ops[d->op].drop == 0.1 && m->ops[d->op].drop_block == 8,
              "resnet20 --drop-path: layer3.2.drop_path is not the last block's at the full rate");
        const PlanStep *h = step_named(p, m, "layer2.1.drop_path");  // block 4 of 0..8: 0.1 * 4 / 8
        CHECK(h && m->ops[h->op].drop == 0.1 * 4 / 8, "resnet20 --drop-path: layer2.1's rate %g (want 0.05)",
              h ? m->ops[h->op].drop : -1.0);
        plan_free(p);
        resnet_free(m);
    }
    // Every combination of the five fusion options on each model: well formed.
    const char *models[] = {"resnet18", "resnet20", "resnet50", "resnet20+blurpool", "resnet18+blurpool",
                            "resnet50+drop", "resnet20+drop"};
    for (size_t a = 0; a < sizeof models / sizeof models[0]; a++) {
        char arch[32];
        snprintf(arch, sizeof arch, "%s", models[a]);
        char *plus = strchr(arch, '+');
        if (plus) *plus = 0;
        int drop = plus && !strcmp(plus + 1, "drop");
        ResNet *m = resnet_create_dp(arch, 3, 10, plus && !drop, drop ? 0.05 : 0.0);
        for (int bits = 0; bits < 32; bits++) {
            ExecOptions o = exec_options_default();
            o.fuse_bn_add = bits & 1;
            o.fuse_bn_stats = (bits >> 1) & 1;
            o.fuse_bn_bwd = (bits >> 2) & 1;
            o.fuse_bn_pool = (bits >> 3) & 1;
            o.fuse_bn_res = (bits >> 4) & 1;
            ExecPlan *p = plan_build(m, &o);
            char tag[64];
            snprintf(tag, sizeof tag, "%s options %02x", models[a], bits);
            check_well_formed(p, m, tag);
            plan_free(p);
        }
        resnet_free(m);
    }
    return test_summary("test_plan");
}
