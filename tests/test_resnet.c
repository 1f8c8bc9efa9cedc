// nn/resnet.c: architecture tables against torchvision's published parameter counts, shapes,
// state-dict naming, backward-ordered parameter offsets and the initialisation statistics.
#include <math.h>
#include <string.h>

#include "nn/resnet.h"
#include "tests/test.h"
#include "util/common.h"

static void check_count(const char *arch, int cin, int classes, size_t expect) {
    ResNet *m = resnet_create(arch, cin, classes);
    CHECK(m != NULL, "resnet_create(%s)", arch);
    if (!m) return;
    CHECK(resnet_param_count(m) == expect, "%s: %zu params, torchvision has %zu", arch, resnet_param_count(m), expect);
    // Offsets: disjoint tensors in [0, n_params) with gaps of less than RESNET_PARAM_ALIGN between
    // them, fc first (produced first by backward), stem conv last.
    size_t total = 0;
    char *seen = ct_zalloc(m->n_params + 1);
    int overlap = 0;
    for (int i = 0; i < m->n_entries; i++) {
        StateEntry *e = &m->entries[i];
        if (e->kind != ENTRY_PARAM) continue;
        total += e->count;
        for (size_t j = 0; j < e->count; j++) overlap |= seen[e->offset + j]++;
    }
    size_t gap = 0, longest = 0;
    for (size_t j = 0; j < m->n_params; j++) {
        gap = seen[j] ? 0 : gap + 1;
        longest = CT_MAX(longest, gap);
    }
    CHECK(total == expect && !overlap && longest < RESNET_PARAM_ALIGN && m->n_params - total < (size_t)m->n_entries * 8,
          "%s: param offsets are not a padded partition (total %zu, longest gap %zu, flat %zu)", arch, total, longest,
          m->n_params);
    free(seen);
    CHECK(m->entries[resnet_find_entry(m, "fc.weight")].offset == 0, "%s: fc.weight not first", arch);
    const StateEntry *c1 = &m->entries[resnet_find_entry(m, "conv1.weight")];
    CHECK(c1->offset + c1->count <= m->n_params && m->n_params - c1->offset - c1->count < RESNET_PARAM_ALIGN,
          "%s: conv1.weight not last", arch);
    // grad_done is monotone over the reversed op list and ends at n_params.
    size_t prev = 0;
    int mono = 1;
    for (int i = m->n_ops - 1; i >= 0; i--) {
        mono &= m->ops[i].grad_done >= prev;
        prev = m->ops[i].grad_done;
    }
    CHECK(mono && prev == m->n_params, "%s: grad_done not monotone", arch);
    resnet_free(m);
}

// Every tensor of params (and of bufs) starts at a multiple of 8 elements: 32 bytes in fp32, 16 in
// the GPU's bf16 copy, whose convs load weights 16 bytes at a time only from such an address (else
// they take engine v1's element-gathered loop; docs/BENCHMARKS.md). The gaps read zero after
// resnet_create, and every bucket boundary is aligned too.
static void check_aligned(const char *arch, int cin, int classes, int init) {
    ResNet *m = resnet_create(arch, cin, classes);
    int bad = 0;
    char first[64] = "";
    for (int i = 0; i < m->n_entries; i++) {
        const StateEntry *e = &m->entries[i];
        if (e->kind == ENTRY_COUNT || e->offset % 8 == 0) continue;
        if (!bad++) snprintf(first, sizeof first, "%s", e->name);
    }
    for (int i = 0; i < m->n_ops; i++) bad += m->ops[i].grad_done % 8 != 0;
    bad += m->n_params % 8 != 0;
    // The gaps of an initialised model hold zero; resnet_zero_padding restores that and nothing else.
    if (init) resnet_init(m, 7, 0);
    size_t nonzero = 0;
    char *in = ct_zalloc(m->n_params);
    for (int i = 0; i < m->n_entries; i++)
        if (m->entries[i].kind == ENTRY_PARAM) memset(in + m->entries[i].offset, 1, m->entries[i].count);
    float *f = ct_alloc(m->n_params * sizeof(float));
    for (size_t j = 0; j < m->n_params; j++) {
        nonzero += !in[j] && m->params[j] != 0.0f;
        f[j] = in[j] ? m->params[j] : 1.0f;
    }
    resnet_zero_padding(m, f);
    CHECK(!bad && !nonzero && !memcmp(f, m->params, m->n_params * sizeof(float)),
          "%s %d classes: %d offsets or boundaries off 8 (first %s), %zu gap elements nonzero, zero_padding %s", arch,
          classes, bad, first, nonzero, memcmp(f, m->params, m->n_params * sizeof(float)) ? "wrong" : "ok");
    free(in), free(f);
    resnet_free(m);
}

// The unpadded layout of older builds (their checkpoints): resnet20 on 10 classes held fc.weight
// [0, 640), fc.bias [640, 650) and layer3.2.bn2.weight from 650 on; padded, the bias is followed
// by 6 zeros and the BN weight starts at 656.
static void check_unpack(void) {
    ResNet *m = resnet_create("resnet20", 3, 10);
    size_t real = resnet_param_count(m);
    CHECK(real == 272474 && m->n_params == 272480, "resnet20/10: %zu params in a flat array of %zu", real, m->n_params);
    const StateEntry *bn = &m->entries[resnet_find_entry(m, "layer3.2.bn2.weight")];
    const StateEntry *c1 = &m->entries[resnet_find_entry(m, "conv1.weight")];
    CHECK(m->entries[resnet_find_entry(m, "fc.bias")].offset == 640 && bn->offset == 656, "resnet20/10: fc.bias at %zu, "
          "layer3.2.bn2.weight at %zu", m->entries[resnet_find_entry(m, "fc.bias")].offset, bn->offset);
    float *packed = ct_alloc(real * sizeof(float)), *dst = ct_alloc(m->n_params * sizeof(float));
    for (size_t j = 0; j < real; j++) packed[j] = (float)(j + 1);
    for (size_t j = 0; j < m->n_params; j++) dst[j] = -1.0f;
    resnet_params_unpack(m, dst, packed);
    int ok = dst[0] == 1.0f && dst[649] == 650.0f && dst[bn->offset] == 651.0f;
    for (size_t j = 650; j < 656; j++) ok &= dst[j] == 0.0f;
    // Every later tensor moved by the same 6 floats, the stem conv included.
    ok &= dst[c1->offset] == (float)(c1->offset - 6 + 1) && dst[m->n_params - 1] == (float)real;
    CHECK(ok, "resnet_params_unpack: %g %g %g ... %g", dst[0], dst[649], dst[bn->offset], dst[m->n_params - 1]);
    free(packed), free(dst);
    resnet_free(m);
}

// BlurPool (FFCV's rule: stride > 1 and >= 16 input channels): which convs read a blur, that the
// blurs add no parameters or entries, and that a blur keeps its input's shape. want: the convs
// whose input is a blur's output, space-separated, in op order.
static void check_blurpool(const char *arch, int cin, int n_blur, const char *want) {
    ResNet *p = resnet_create(arch, cin, 10), *b = resnet_create_ex(arch, cin, 10, 1);
    int blurs = 0;
    char got[512] = "";
    for (int i = 0; i < b->n_ops; i++) {
        const Op *op = &b->ops[i];
        blurs += op->kind == OP_BLUR;
        if (op->kind != OP_CONV) continue;
        for (int j = 0; j < i; j++)
            if (b->ops[j].kind == OP_BLUR && b->ops[j].out == op->in)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", got[0] ? " " : "", op->name);
    }
    CHECK(b->blurpool && !p->blurpool && blurs == n_blur && !strcmp(got, want),
          "%s (%d channels) blurpool: %d blurs before [%s], expected %d before [%s]", arch, cin, blurs, got, n_blur, want);
    CHECK(b->n_params == p->n_params && b->n_bufs == p->n_bufs && b->n_entries == p->n_entries &&
              b->n_ops == p->n_ops + n_blur,
          "%s blurpool: %zu params %d entries %d ops vs %zu %d %d", arch, b->n_params, b->n_entries, b->n_ops,
          p->n_params, p->n_entries, p->n_ops);
    TensorDim *d = ct_alloc(b->n_tensors * sizeof(TensorDim)), *dp = ct_alloc(p->n_tensors * sizeof(TensorDim));
    CHECK(resnet_shapes(b, 33, 31, d) == 0 && resnet_shapes(p, 33, 31, dp) == 0, "%s blurpool shapes", arch);
    int same = d[b->n_tensors - 2].C == dp[p->n_tensors - 2].C;
    for (int i = 0; i < b->n_ops; i++)
        if (b->ops[i].kind == OP_BLUR) {
            const TensorDim x = d[b->ops[i].in], y = d[b->ops[i].out];
            same &= x.H == y.H && x.W == y.W && x.C == y.C && x.C >= 16;
        }
    CHECK(same, "%s blurpool: a blur changes its tensor's shape or has < 16 channels", arch);
    free(d), free(dp);
    resnet_free(p), resnet_free(b);
}

// ResNeXt and Wide ResNet: torchvision's widths and groups on the Bottleneck's 3x3 (torch's
// state_dict shapes: resnext50_32x4d layer1.0.conv2 [128, 4, 3, 3], layer4.2.conv2 [1024, 32, 3, 3];
// resnext101_64x4d layer1.0.conv2 [256, 4, 3, 3]; wide_resnet50_2 layer1.0.conv2 [128, 128, 3, 3]).
static void check_grouped(void) {
    const struct {
        const char *arch, *entry;
        int64_t shape[4];
        int groups;
    } want[] = {
        {"resnext50_32x4d", "layer1.0.conv2.weight", {128, 4, 3, 3}, 32},
        {"resnext50_32x4d", "layer4.2.conv2.weight", {1024, 32, 3, 3}, 32},
        {"resnext50_32x4d", "layer1.0.conv3.weight", {256, 128, 1, 1}, 1},
        {"resnext101_32x8d", "layer1.0.conv2.weight", {256, 8, 3, 3}, 32},
        {"resnext101_64x4d", "layer1.0.conv2.weight", {256, 4, 3, 3}, 64},
        {"resnext101_64x4d", "layer4.2.conv2.weight", {2048, 32, 3, 3}, 64},
        {"wide_resnet50_2", "layer1.0.conv2.weight", {128, 128, 3, 3}, 1},
        {"wide_resnet101_2", "layer4.2.conv1.weight", {1024, 2048, 1, 1}, 1},
    };
    for (size_t i = 0; i < CT_ARRAY_LEN(want); i++) {
        ResNet *m = resnet_create(want[i].arch, 3, 10);
        int e = m ? resnet_find_entry(m, want[i].entry) : -1;
        CHECK(e >= 0 && !memcmp(m->entries[e].shape, want[i].shape, sizeof want[i].shape), "%s %s: shape", want[i].arch,
              want[i].entry);
        char op[48];
        snprintf(op, sizeof op, "%.*s", (int)(strlen(want[i].entry) - 7), want[i].entry);  // less ".weight"
        int groups = -1;
        for (int j = 0; m && j < m->n_ops; j++)
            if (m->ops[j].kind == OP_CONV && !strcmp(m->ops[j].name, op)) groups = m->ops[j].groups;
        CHECK(groups == want[i].groups, "%s %s: groups %d, torchvision has %d", want[i].arch, op, groups, want[i].groups);
        resnet_free(m);
    }
    CHECK(strstr(resnet_arch_list(), "resnext101_64x4d") && strstr(resnet_arch_list(), "wide_resnet101_2"),
          "resnet_arch_list lacks the ResNeXt / Wide ResNet names");
}

int main(void) {
    // torchvision (1000 classes, 3 channels): sum(p.numel() for p in model.parameters()).
    check_count("resnet18", 3, 1000, 11689512);
    check_count("resnet34", 3, 1000, 21797672);
    check_count("resnet50", 3, 1000, 25557032);
    check_count("resnet101", 3, 1000, 44549160);
    check_count("resnet152", 3, 1000, 60192808);
    check_count("resnext50_32x4d", 3, 1000, 25028904);
    check_count("resnext101_32x8d", 3, 1000, 88791336);
    check_count("resnext101_64x4d", 3, 1000, 83455272);
    check_count("wide_resnet50_2", 3, 1000, 68883240);
    check_count("wide_resnet101_2", 3, 1000, 126886696);
    check_count("resnext50_32x4d", 3, 10, 23000394);
    check_grouped();
    // CIFAR resnet20 with projection shortcuts: 269,722 (He et al., option A) + 2 projections
    // (16*32 + 2*32 and 32*64 + 2*64) = 272,474.
    check_count("resnet20", 3, 10, 272474);
    check_count("resnet18", 3, 10, 11181642);
    check_unpack();
    const char *archs[] = {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnet20", "resnet32",
                           "resnet44", "resnet56", "resnet110", "resnext50_32x4d", "resnext101_64x4d", "wide_resnet50_2"};
    const int classes[] = {10, 1000, 7, 1};
    for (int a = 0; a < (int)CT_ARRAY_LEN(archs); a++)  // (initialising the large ones would take minutes)
        for (int k = 0; k < 4; k++) check_aligned(archs[a], k == 3 ? 1 : 3, classes[k], a == 0 || (a >= 5 && a < 10));
    CHECK(resnet_create("resnet19", 3, 10) == NULL, "unknown arch accepted");
    CHECK(!resnet_arch_valid("resnet") && resnet_arch_valid("resnet110"), "arch_valid");
    // A block's conv1 and downsample.0 read the same tensor and share its blur (BasicBlock); in a
    // Bottleneck the stride sits on conv2, whose input is not the downsample's.
    check_blurpool("resnet20", 3, 2, "layer2.0.conv1 layer2.0.downsample.0 layer3.0.conv1 layer3.0.downsample.0");
    check_blurpool("resnet18", 3, 3,
                   "layer2.0.conv1 layer2.0.downsample.0 layer3.0.conv1 layer3.0.downsample.0 layer4.0.conv1 "
                   "layer4.0.downsample.0");
    check_blurpool("resnet50", 3, 6,
                   "layer2.0.conv2 layer2.0.downsample.0 layer3.0.conv2 layer3.0.downsample.0 layer4.0.conv2 "
                   "layer4.0.downsample.0");
    // The rule counts input channels, not position: a 16-channel input's strided stem is blurred.
    check_blurpool("resnet18", 16, 4,
                   "conv1 layer2.0.conv1 layer2.0.downsample.0 layer3.0.conv1 layer3.0.downsample.0 layer4.0.conv1 "
                   "layer4.0.downsample.0");

    // Shapes: resnet50 on 224x224 ends in 7x7x2048 before the pool; resnet20 on 32x32 in 8x8x64.
    ResNet *m = resnet_create("resnet50", 3, 1000);
    TensorDim *d = ct_alloc(m->n_tensors * sizeof(TensorDim));
    CHECK(resnet_shapes(m, 224, 224, d) == 0, "resnet50 shapes");
    const Op *pool = &m->ops[m->n_ops - 2];
    CHECK(pool->kind == OP_AVGPOOL && d[pool->in].H == 7 && d[pool->in].W == 7 && d[pool->in].C == 2048,
          "resnet50 final map %dx%dx%d", d[pool->in].H, d[pool->in].W, d[pool->in].C);
    CHECK(d[m->n_tensors - 1].C == 1000, "logits channels");
    CHECK(resnet_shapes(m, 1, 1, d) == 0, "1x1 input still defined (torch accepts it)");
    // Names in torchvision order, layouts.
    CHECK(strcmp(m->entries[0].name, "conv1.weight") == 0, "first entry %s", m->entries[0].name);
    int ds = resnet_find_entry(m, "layer2.0.downsample.0.weight");
    CHECK(ds >= 0 && m->entries[ds].shape[0] == 512 && m->entries[ds].shape[1] == 256, "layer2.0.downsample.0");
    int c2 = resnet_find_entry(m, "layer3.0.conv2.weight");
    CHECK(c2 >= 0, "layer3.0.conv2.weight");
    int nbt = resnet_find_entry(m, "layer4.2.bn3.num_batches_tracked");
    CHECK(nbt >= 0 && m->entries[nbt].kind == ENTRY_COUNT && m->entries[nbt].ndim == 0, "num_batches_tracked");
    // v1.5: the stride-2 conv of layer3.0 is conv2 (3x3), not conv1.
    for (int i = 0; i < m->n_ops; i++) {
        if (strcmp(m->ops[i].name, "layer3.0.conv2") == 0) CHECK(m->ops[i].stride == 2, "v1.5 stride on 3x3");
        if (strcmp(m->ops[i].name, "layer3.0.conv1") == 0) CHECK(m->ops[i].stride == 1, "v1.5 conv1 stride 1");
    }
    free(d);

    // Init statistics: conv std sqrt(2/fan_out), BN 1/0, fc uniform in +-1/sqrt(fan_in), zero-init.
    resnet_init(m, 42, 1);
    const StateEntry *e = &m->entries[resnet_find_entry(m, "layer4.0.conv2.weight")];
    double s2 = 0, mean = 0;
    for (size_t j = 0; j < e->count; j++) {
        mean += m->params[e->offset + j];
        s2 += (double)m->params[e->offset + j] * m->params[e->offset + j];
    }
    mean /= e->count;
    double std = sqrt(s2 / e->count), expect = sqrt(2.0 / (512 * 9));
    CHECK(fabs(std / expect - 1) < 0.01 && fabs(mean) < 0.01 * expect, "conv init std %g expect %g mean %g", std, expect, mean);
    e = &m->entries[resnet_find_entry(m, "fc.weight")];
    float bound = 1.0f / sqrtf(2048.0f), mx = 0;
    for (size_t j = 0; j < e->count; j++) mx = fmaxf(mx, fabsf(m->params[e->offset + j]));
    CHECK(mx <= bound && mx > 0.99f * bound, "fc init max %g bound %g", mx, bound);
    e = &m->entries[resnet_find_entry(m, "layer1.0.bn3.weight")];
    CHECK(m->params[e->offset] == 0.0f, "zero_init_residual bn3");
    e = &m->entries[resnet_find_entry(m, "layer1.0.bn2.weight")];
    CHECK(m->params[e->offset] == 1.0f, "bn2 weight 1");
    e = &m->entries[resnet_find_entry(m, "layer1.0.downsample.1.weight")];
    CHECK(m->params[e->offset] == 1.0f, "downsample bn weight stays 1");
    e = &m->entries[resnet_find_entry(m, "bn1.running_var")];
    CHECK(m->bufs[e->offset] == 1.0f, "running_var init 1");
    // Deterministic in the seed.
    ResNet *m2 = resnet_create("resnet50", 3, 1000);
    resnet_init(m2, 42, 1);
    CHECK(memcmp(m->params, m2->params, m->n_params * sizeof(float)) == 0, "init not deterministic");
    resnet_init(m2, 43, 1);
    CHECK(memcmp(m->params, m2->params, m->n_params * sizeof(float)) != 0, "seed ignored");
    resnet_free(m2);
    resnet_free(m);

    // Gradient boundaries (what dist/ cuts buckets at): one per op with parameters, increasing,
    // fc's weight and bias first, the last one the whole buffer; max bounds what is written.
    m = resnet_create("resnet18", 3, 1000);
    size_t nbd, *bd = resnet_grad_boundaries_alloc(m, &nbd), with_w = 0, up = 1;
    for (int i = 0; i < m->n_ops; i++) with_w += m->ops[i].w >= 0;
    for (size_t i = 1; i < nbd; i++) up &= bd[i] > bd[i - 1];
    CHECK(nbd == with_w && nbd == 41 && up, "resnet18: %zu boundaries (%zu ops with parameters)", nbd, with_w);
    CHECK(bd[0] == 512 * 1000 + 1000 && bd[nbd - 1] == m->n_params && m->n_params == 11689512, "resnet18 boundaries %zu .. %zu", bd[0], bd[nbd - 1]);
    size_t two[3] = {0, 0, 7};
    CHECK(resnet_grad_boundaries(m, two, 2) == nbd && two[0] == bd[0] && two[1] == bd[1] && two[2] == 7,
          "resnet_grad_boundaries with max 2");
    free(bd);
    resnet_free(m);

    // Layout conversion round trip.
    float a[2 * 3 * 2 * 2], b[24], c[24];
    for (int i = 0; i < 24; i++) a[i] = (float)i;
    oihw_to_krsc(b, a, 2, 3, 2, 2);
    krsc_to_oihw(c, b, 2, 3, 2, 2);
    CHECK(memcmp(a, c, sizeof a) == 0, "layout round trip");
    CHECK(b[1] == a[4], "krsc[0,0,0,1] == oihw[0,1,0,0]");
    // 1-channel CIFAR model.
    m = resnet_create("resnet56", 1, 7);
    CHECK(m && m->entries[0].shape[1] == 1 && m->entries[resnet_find_entry(m, "fc.weight")].shape[0] == 7, "resnet56 1ch 7 classes");
    resnet_free(m);
    return test_summary("test_resnet");
}
