// CPU losses: cross-entropy with label smoothing, binary cross-entropy (timm's), Hinton
// distillation, top-k accuracy.
// Rows are independent; per-row math in double, the batch mean summed in row order.
#include <math.h>

#include "nn/layers.h"
#include "util/common.h"

// Row max and log(sum(exp(z - max))) of z / T.
static void row_lse(const float *z, int K, double invT, double *max, double *lse) {
    double m = -INFINITY;
    for (int k = 0; k < K; k++) m = fmax(m, z[k] * invT);
    double s = 0;
    for (int k = 0; k < K; k++) s += exp(z[k] * invT - m);
    *max = m;
    *lse = log(s);
}

// loss_i = -sum_k t_k log p_k with the soft target of a mixed pair (Mixup/CutMix, timm's
// mixup_target): t = lam * s(a) + (1 - lam) * s(b), s(y) = (1 - eps) onehot(y) + eps / K, and
// dloss_i/dz_k = p_k - t_k; the batch loss is the mean, so each row's gradient is divided by N.
// lam = 1 with labels_b == labels is the plain smoothed cross-entropy, bit for bit (the b terms
// are multiplied by exactly 0). A hit is a row whose first argmax is the dominant label: a when
// lam >= 0.5, else b.
float softmax_xent_mix(float *dlogits, const float *logits, const int32_t *labels, const int32_t *labels_b, float lam,
                       int N, int K, float smoothing, float grad_scale, int *correct) {
    if (!(lam >= 0 && lam <= 1)) ct_die("softmax_xent_mix: lam %g is outside [0, 1]", lam);
    for (int n = 0; n < N; n++)
        if (labels[n] < 0 || labels[n] >= K || labels_b[n] < 0 || labels_b[n] >= K)
            ct_die("softmax_xent: label %d (partner %d) of batch row %d is outside [0, %d)", labels[n], labels_b[n],
                   n, K);
    double *row_loss = ct_alloc((size_t)N * sizeof(double));
    int hits = 0;
    const double eps = smoothing, la = lam, lb = 1.0 - (double)lam;
#pragma omp parallel for schedule(static) reduction(+ : hits)
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * K;
        double m, lse;
        row_lse(z, K, 1.0, &m, &lse);
        const int ya = labels[n], yb = labels_b[n];
        double sumz = 0;
        int arg = 0;
        for (int k = 0; k < K; k++) {
            sumz += z[k];
            if (z[k] > z[arg]) arg = k;
        }
        hits += arg == (la >= 0.5 ? ya : yb);
        // log p_k = z_k - m - lse
        row_loss[n] = la * (1 - eps) * (m + lse - z[ya]) + lb * (1 - eps) * (m + lse - z[yb]) +
                      eps * (m + lse - sumz / K);
        if (dlogits) {
            float *d = dlogits + (size_t)n * K;
            const double scale = (double)grad_scale / N;
            for (int k = 0; k < K; k++) {
                const double p = exp(z[k] - m - lse);
                const double t = eps / K + (k == ya ? la * (1 - eps) : 0) + (k == yb ? lb * (1 - eps) : 0);
                d[k] = (float)((p - t) * scale);
            }
        }
    }
    double total = 0;
    for (int n = 0; n < N; n++) total += row_loss[n];
    free(row_loss);
    if (correct) *correct = hits;
    return (float)(total / N);
}

float softmax_xent(float *dlogits, const float *logits, const int32_t *labels, int N, int K, float smoothing,
                   float grad_scale, int *correct) {
    return softmax_xent_mix(dlogits, logits, labels, labels, 1.0f, N, K, smoothing, grad_scale, correct);
}

// Per element: l = max(z, 0) - z t + log(1 + exp(-|z|)) (torch's stable form), dl/dz = sigmoid(z) - t;
// the batch loss divides the sum by N K (or N with sum_classes), and so does each gradient.
float bce_mix(float *dlogits, const float *logits, const int32_t *labels, const int32_t *labels_b, float lam,
              int N, int K, float smoothing, float threshold, int sum_classes, float grad_scale, int *correct) {
    if (!(lam >= 0 && lam <= 1)) ct_die("bce_mix: lam %g is outside [0, 1]", lam);
    for (int n = 0; n < N; n++)
        if (labels[n] < 0 || labels[n] >= K || labels_b[n] < 0 || labels_b[n] >= K)
            ct_die("bce: label %d (partner %d) of batch row %d is outside [0, %d)", labels[n], labels_b[n], n, K);
    double *row_loss = ct_alloc((size_t)N * sizeof(double));
    int hits = 0;
    const double off = (double)smoothing / K, on = 1.0 - smoothing + off, la = lam, lb = 1.0 - (double)lam;
    const double denom = sum_classes ? (double)N : (double)N * K;
#pragma omp parallel for schedule(static) reduction(+ : hits)
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * K;
        const int ya = labels[n], yb = labels_b[n];
        int arg = 0;
        double l = 0;
        for (int k = 0; k < K; k++) {
            if (z[k] > z[arg]) arg = k;
            double t = la * (k == ya ? on : off) + lb * (k == yb ? on : off);
            if (threshold >= 0) t = t > threshold ? 1.0 : 0.0;
            const double x = z[k];
            l += fmax(x, 0.0) - x * t + log1p(exp(-fabs(x)));
            if (dlogits) dlogits[(size_t)n * K + k] = (float)((1.0 / (1.0 + exp(-x)) - t) * grad_scale / denom);
        }
        hits += arg == (la >= 0.5 ? ya : yb);
        row_loss[n] = l;
    }
    double total = 0;
    for (int n = 0; n < N; n++) total += row_loss[n];
    free(row_loss);
    if (correct) *correct = hits;
    return (float)(total / denom);
}

// loss = T^2 / N * sum_i KL(pt_i || ps_i), pt = softmax(t / T), ps = softmax(s / T);
// dloss/ds_k = T / N * (ps_k - pt_k).
float kd_loss(float *dlogits, const float *logits, const float *teacher_logits, int N, int K, float temperature,
              float grad_scale) {
    if (!(temperature > 0)) ct_die("kd_loss: temperature must be positive (got %g)", temperature);
    const double T = temperature, invT = 1.0 / T;
    double *row_loss = ct_alloc((size_t)N * sizeof(double));
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *s = logits + (size_t)n * K, *t = teacher_logits + (size_t)n * K;
        double ms, ls, mt, lt;
        row_lse(s, K, invT, &ms, &ls);
        row_lse(t, K, invT, &mt, &lt);
        double kl = 0;
        for (int k = 0; k < K; k++) {
            const double logpt = t[k] * invT - mt - lt, logps = s[k] * invT - ms - ls;
            const double pt = exp(logpt);
            if (pt > 0) kl += pt * (logpt - logps);
            if (dlogits) dlogits[(size_t)n * K + k] += (float)(grad_scale * T / N * (exp(logps) - pt));
        }
        row_loss[n] = kl;
    }
    double total = 0;
    for (int n = 0; n < N; n++) total += row_loss[n];
    free(row_loss);
    return (float)(T * T * total / N);
}

int topk_correct(const float *logits, const int32_t *labels, int N, int K, int k) {
    int hits = 0;
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * K;
        const int y = labels[n];
        if (y < 0 || y >= K) ct_die("topk_correct: label %d of batch row %d is outside [0, %d)", y, n, K);
        int above = 0;
        for (int j = 0; j < K; j++) above += z[j] > z[y];
        hits += above < k;
    }
    return hits;
}
