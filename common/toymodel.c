// The course's ToyModels (toymodel.h): forward, backward with per-parameter hooks, SGD.
// Letters: B rows of the batch; a linear layer maps d_in -> d_out.
#include "common/toymodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/npy.h"
#include "common/rng.h"

const char* toy_kind_name(toy_kind_t k) { return k == TOY_TIED ? "tied" : "toy"; }

int toy_kind_parse(const char* s, toy_kind_t* out) {
    if (s && strcmp(s, "toy") == 0) { *out = TOY_MODEL; return 0; }
    if (s && strcmp(s, "tied") == 0) { *out = TOY_TIED; return 0; }
    return -1;
}

// ------------------------------------------------------------------ layout
static int add_param(toy_model_t* m, const char* name, int rows, int cols, int trainable) {
    toy_param_t* p = &m->p[m->n_params];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->rank = cols > 0 ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols;
    p->numel = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
    p->offset = m->total;  // packed: no padding between parameters
    p->trainable = trainable;
    m->total += p->numel;
    return m->n_params++;
}

static void add_linear(toy_model_t* m, int w, int b, int relu) {
    toy_linear_t* l = &m->lin[m->n_linears++];
    l->w = w;
    l->b = b;
    l->d_out = m->p[w].shape[0];
    l->d_in = m->p[w].shape[1];
    l->relu = relu;
    m->uses[w]++;
    if (b >= 0) m->uses[b]++;
}

// The parameters in the order of PyTorch's model.parameters(): for ToyModel the module's own
// no_grad_fixed_param comes first, then the children's.
static void build_toy(toy_model_t* m) {
    add_param(m, "no_grad_fixed_param", 2, 0, 0);  // never read by the forward
    const int fc1 = add_param(m, "fc1.weight", 10, TOY_D_IN, 1);
    const int fc2w = add_param(m, "fc2.fc.weight", 50, 10, 1);
    const int fc2b = add_param(m, "fc2.fc.bias", 50, 0, 0);  // frozen, but used
    const int fc3 = add_param(m, "fc3.weight", TOY_D_OUT, 50, 1);
    add_linear(m, fc1, -1, 1);
    add_linear(m, fc2w, fc2b, 1);
    add_linear(m, fc3, -1, 0);
}

static void build_tied(toy_model_t* m) {
    const int fc1 = add_param(m, "fc1.weight", 10, TOY_D_IN, 1);
    const int fc2 = add_param(m, "fc2.weight", 50, 10, 1);  // also fc4.weight
    const int fc3 = add_param(m, "fc3.weight", 10, 50, 1);
    const int fc5 = add_param(m, "fc5.weight", TOY_D_OUT, 50, 1);
    add_linear(m, fc1, -1, 1);
    add_linear(m, fc2, -1, 1);
    add_linear(m, fc3, -1, 1);
    add_linear(m, fc2, -1, 1);  // fc4: the same weight
    add_linear(m, fc5, -1, 0);
}

static float* xcalloc_f(size_t n) {
    float* q = calloc(n ? n : 1, sizeof(float));
    if (!q) DIE("out of memory: %zu floats", n);
    return q;
}

void toy_create(toy_model_t* m, toy_kind_t kind, int max_B) {
    if (max_B < 1) DIE("toy_create: batch capacity %d < 1", max_B);
    memset(m, 0, sizeof *m);
    m->kind = kind;
    if (kind == TOY_TIED) build_tied(m);
    else build_toy(m);
    m->max_B = max_B;
    m->params = xcalloc_f(m->total);
    m->grads = xcalloc_f(m->total);
    m->act[0] = xcalloc_f((size_t)max_B * TOY_D_IN);
    for (int l = 0; l < m->n_linears; l++) m->act[l + 1] = xcalloc_f((size_t)max_B * (size_t)m->lin[l].d_out);
    m->target = xcalloc_f((size_t)max_B * TOY_D_OUT);
    m->dy = xcalloc_f((size_t)max_B * TOY_D_HIDDEN);
    m->dx = xcalloc_f((size_t)max_B * TOY_D_HIDDEN);
}

void toy_destroy(toy_model_t* m) {
    free(m->params);
    free(m->grads);
    for (int l = 0; l <= m->n_linears; l++) free(m->act[l]);
    free(m->target);
    free(m->dy);
    free(m->dx);
    memset(m, 0, sizeof *m);
}

// ------------------------------------------------------------------ parameters
void toy_init_params(toy_model_t* m, uint64_t seed) {
    rng_t r = rng_make(seed);
    for (int i = 0; i < m->n_params; i++) {
        float* p = m->params + m->p[i].offset;
        if (strcmp(m->p[i].name, "no_grad_fixed_param") == 0) {
            p[0] = p[1] = 2.0f;  // torch.tensor([2.0, 2.0]) in the course
            continue;
        }
        int fan_in = 0;  // nn.Linear: weight and bias both U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        for (int l = 0; l < m->n_linears; l++)
            if (m->lin[l].w == i || m->lin[l].b == i) fan_in = m->lin[l].d_in;
        const float bound = 1.0f / sqrtf((float)fan_in);
        rng_fill_uniform(&r, p, m->p[i].numel, -bound, bound);
    }
}

int toy_load_params(const toy_model_t* m, const char* dir, int step, float* dst, char* err,
                    size_t errlen) {
    for (int i = 0; i < m->n_params; i++) {
        const toy_param_t* p = &m->p[i];
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.npy", dir, p->name);
        npy_array_t a;
        char why[512];
        if (npy_read(path, &a, why, sizeof why)) return set_err(err, errlen, "%s", why);
        // [shape...] for one snapshot, [S, shape...] for one per step
        int64_t want[3] = {-1, p->shape[0], p->shape[1]};
        const int lead = step >= 0;
        const int rank = p->rank + lead;
        if (npy_check(&a, DT_F32, rank, want + 1 - lead, why, sizeof why)) {
            npy_array_free(&a);
            return set_err(err, errlen, "%s: %s", path, why);
        }
        if (lead && step >= a.shape[0]) {
            npy_array_free(&a);
            return set_err(err, errlen, "%s: holds %lld steps, step %d was asked for", path,
                           (long long)a.shape[0], step);
        }
        memcpy(dst + p->offset, (const float*)a.data + (lead ? (size_t)step * p->numel : 0),
               p->numel * sizeof(float));
        npy_array_free(&a);
    }
    return 0;
}

// ------------------------------------------------------------------ forward
float toy_forward(toy_model_t* m, const float* x, const float* target, int B) {
    if (B < 1 || B > m->max_B) DIE("toy_forward: %d rows, capacity %d", B, m->max_B);
    m->cur_B = B;
    memcpy(m->act[0], x, (size_t)B * TOY_D_IN * sizeof(float));
    for (int l = 0; l < m->n_linears; l++) {
        const toy_linear_t* L = &m->lin[l];
        const float* W = m->params + m->p[L->w].offset;                // (d_out, d_in)
        const float* bias = L->b >= 0 ? m->params + m->p[L->b].offset : NULL;  // (d_out)
        const float* in = m->act[l];                                    // (B, d_in)
        float* out = m->act[l + 1];                                     // (B, d_out)
        for (int r = 0; r < B; r++)
            for (int o = 0; o < L->d_out; o++) {
                float z = bias ? bias[o] : 0.0f;
                for (int i = 0; i < L->d_in; i++) z += in[r * L->d_in + i] * W[o * L->d_in + i];
                out[r * L->d_out + o] = L->relu && z < 0.0f ? 0.0f : z;
            }
    }
    if (!target) return NAN;
    memcpy(m->target, target, (size_t)B * TOY_D_OUT * sizeof(float));
    const float* y = m->act[m->n_linears];  // (B, 5)
    double sum = 0;
    for (int k = 0; k < B * TOY_D_OUT; k++) {
        const double e = (double)y[k] - (double)target[k];
        sum += e * e;
    }
    return (float)(sum / (B * TOY_D_OUT));
}

// ------------------------------------------------------------------ backward
void toy_backward(toy_model_t* m, float loss_scale, grad_ready_fn hook, void* ctx) {
    const int B = m->cur_B;
    if (B < 1) DIE("toy_backward: no forward with targets before it");
    int seen[TOY_MAX_PARAMS] = {0};  // contributions written so far (the tied weight has two)
    // d loss / d output: loss = (1/(B·5)) Σ (y - t)²
    const float* y = m->act[m->n_linears];
    const float c = loss_scale * 2.0f / (float)(B * TOY_D_OUT);
    float* dy = m->dy;  // (B, d_out) of the current layer
    float* dx = m->dx;  // (B, d_in)
    for (int k = 0; k < B * TOY_D_OUT; k++) dy[k] = c * (y[k] - m->target[k]);

    for (int l = m->n_linears - 1; l >= 0; l--) {
        const toy_linear_t* L = &m->lin[l];
        const int di = L->d_in, dout = L->d_out;
        const float* in = m->act[l];  // (B, d_in)
        if (L->relu)  // through the ReLU: torch passes the gradient where the output is > 0
            for (int k = 0; k < B * dout; k++)
                if (!(m->act[l + 1][k] > 0.0f)) dy[k] = 0.0f;
        // bias before weight: the reverse of the table order within a layer
        if (L->b >= 0 && m->p[L->b].trainable) {
            float* db = m->grads + m->p[L->b].offset;  // (d_out) = Σ_rows dy
            for (int o = 0; o < dout; o++) {
                float s = seen[L->b] ? db[o] : 0.0f;
                for (int r = 0; r < B; r++) s += dy[r * dout + o];
                db[o] = s;
            }
            if (++seen[L->b] == m->uses[L->b] && hook) hook(ctx, L->b);
        }
        if (m->p[L->w].trainable) {
            float* dW = m->grads + m->p[L->w].offset;  // (d_out, d_in) = dyᵀ x
            for (int o = 0; o < dout; o++)
                for (int i = 0; i < di; i++) {
                    float s = seen[L->w] ? dW[o * di + i] : 0.0f;  // first use writes, later ones add
                    for (int r = 0; r < B; r++) s += dy[r * dout + o] * in[r * di + i];
                    dW[o * di + i] = s;
                }
            if (++seen[L->w] == m->uses[L->w] && hook) hook(ctx, L->w);
        }
        if (l == 0) break;  // no gradient for the input
        const float* W = m->params + m->p[L->w].offset;
        for (int r = 0; r < B; r++)  // dx = dy W
            for (int i = 0; i < di; i++) {
                float s = 0.0f;
                for (int o = 0; o < dout; o++) s += dy[r * dout + o] * W[o * di + i];
                dx[r * di + i] = s;
            }
        float* t = dy;
        dy = dx;
        dx = t;
    }
}

void toy_sgd_step(toy_model_t* m, float lr) {
    for (int i = 0; i < m->n_params; i++) {
        if (!m->p[i].trainable) continue;
        float* p = m->params + m->p[i].offset;
        const float* g = m->grads + m->p[i].offset;
        for (size_t k = 0; k < m->p[i].numel; k++) p[k] -= lr * g[k];
    }
}

void toy_zero_grads(toy_model_t* m) { memset(m->grads, 0, m->total * sizeof(float)); }

double toy_check_close(toy_checker_t* k, const toy_model_t* m, const float* got, const float* want,
                       double rtol, double atol, const char* what, int step) {
    double worst = 0;
    for (int i = 0; i < m->n_params; i++) {
        const toy_param_t* p = &m->p[i];
        size_t nbad = 0, first = 0;
        for (size_t j = p->offset; j < p->offset + p->numel; j++) {
            const double d = fabs((double)got[j] - (double)want[j]);
            if (isnan(d) || isnan(worst)) worst = NAN;
            else if (d > worst) worst = d;
            if (!(d <= atol + rtol * fabs((double)want[j])) && nbad++ == 0) first = j;
        }
        if (nbad) {
            k->bad++;
            fprintf(stderr, "rank %d: %s: step %d: %s: %s: %zu of %zu elements differ (rtol %g, "
                    "atol %g); first [%zu] got %.9g want %.9g\n", k->rank, k->run, step, what,
                    p->name, nbad, p->numel, rtol, atol, first - p->offset, (double)got[first],
                    (double)want[first]);
        }
    }
    return worst;
}

void toy_check_bitwise(toy_checker_t* k, const toy_model_t* m, const float* got, const float* want,
                       int which, const char* what, int step) {
    for (int i = 0; i < m->n_params; i++) {
        const toy_param_t* p = &m->p[i];
        if (which >= 0 && p->trainable != which) continue;
        if (memcmp(got + p->offset, want + p->offset, p->numel * sizeof(float)) != 0) {
            k->bad++;
            fprintf(stderr, "rank %d: %s: step %d: %s: %s is not bitwise equal\n", k->rank, k->run,
                    step, what, p->name);
        }
    }
}
