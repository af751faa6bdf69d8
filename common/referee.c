// common/referee.h: one process's model against a split run's record.
#include "common/referee.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/check.h"
#include "common/model_cpu.h"

// ||a − b||₂ / ||ref − ref0||₂ over n elements (ref0 NULL: zeros; 0/0 = 0).
static double rel_norm(const float* a, const float* b, const float* ref0, const float* ref, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = (double)a[i] - b[i], q = (double)ref[i] - (ref0 ? ref0[i] : 0.0f);
        d += e * e;
        r += q * q;
    }
    return r > 0 ? sqrt(d / r) : (d > 0 ? INFINITY : 0.0);
}

int referee_one_process(const model_config_t* cfg, const adamw_config_t* opt, const data_source_t* data, int B,
                        int T, int K, uint64_t seed, const double* losses, const double* gnorms, const float* g0,
                        const float* gp, const char* who, const char* what) {
    const double REL = REFEREE_REL, UPD = REFEREE_UPD;
    model_cpu_t ref;
    model_cpu_create(&ref, cfg, B, T, seed);
    const param_layout_t* lay = &ref.layout;
    float* p_init = malloc(lay->total * sizeof(float));
    int32_t* in = malloc((size_t)B * T * sizeof(int32_t));
    int32_t* tg = malloc((size_t)B * T * sizeof(int32_t));
    if (!p_init || !in || !tg) DIE("referee: out of host memory");
    memcpy(p_init, ref.params, lay->total * sizeof(float));
    int bad = 0;
    double wl = 0, wg = 0;
    for (int k = 0; k < K; k++) {
        sample_batch(data, B, T, k, in, tg);
        const float l = model_cpu_forward(&ref, in, tg, B, T);
        model_cpu_backward(&ref, NULL, NULL);
        double sq = 0;
        for (size_t i = 0; i < lay->total; i++) sq += (double)ref.grads[i] * ref.grads[i];
        const double gn = sqrt(sq);
        const double el = fabs(losses[k] - l) / fabs(l), eg = fabs(gnorms[k] - gn) / gn;
        wl = el > wl ? el : wl;
        wg = eg > wg ? eg : wg;
        const int lok = el <= REL, gok = eg <= REL;
        printf("check: step %d: loss %.7f vs one process %.7f%s, grad norm %.7f vs %.7f%s\n", k, losses[k], l,
               lok ? "" : " DIFFERENT", gnorms[k], gn, gok ? "" : " DIFFERENT");
        bad += !lok + !gok;
        if (k == 0) {
            double worst = 0;
            int wi = 0;
            for (int i = 0; i < lay->n; i++) {
                const param_info_t* pi = &lay->p[i];
                const double e = rel_norm(g0 + pi->offset, ref.grads + pi->offset, NULL, ref.grads + pi->offset, pi->numel);
                if (!(e <= worst)) worst = e, wi = i;
            }
            printf("check: step 0 gradients: worst parameter %s, ||g_%s - g_one|| / ||g_one|| = %.3g%s\n",
                   lay->p[wi].name, who, worst, worst <= REL ? "" : " DIFFERENT");
            bad += !(worst <= REL);
        }
        model_cpu_adamw_step(&ref, opt);
    }
    double worst = 0, dd = 0, du = 0;
    int wi = 0;
    size_t nbeyond = 0;
    for (int i = 0; i < lay->n; i++) {
        const param_info_t* pi = &lay->p[i];
        const double e = rel_norm(gp + pi->offset, ref.params + pi->offset, p_init + pi->offset, ref.params + pi->offset, pi->numel);
        if (!(e <= worst)) worst = e, wi = i;
    }
    for (size_t i = 0; i < lay->total; i++) {
        const double e = (double)gp[i] - ref.params[i], u = (double)ref.params[i] - p_init[i];
        dd += e * e;
        du += u * u;
        if (!(fabs(e) <= 1e-5 + 1e-4 * fabs(ref.params[i]))) nbeyond++;
    }
    const double all = du > 0 ? sqrt(dd / du) : INFINITY;
    printf("check: parameters after %d steps: ||p_%s - p_one|| / ||p_one - p_init|| = %.3g%s (worst parameter %s: %.3g); "
           "%zu of %zu elements beyond rtol 1e-4, atol 1e-5\n",
           K, who, all, all <= UPD ? "" : " DIFFERENT", lay->p[wi].name, worst, nbeyond, param_count(lay));
    printf("check: worst relative difference: loss %.3g, grad norm %.3g (bound %.0e); parameters %.3g (bound %.0e)\n", wl,
           wg, REL, all, UPD);
    bad += !(all <= UPD);
    if (!bad) printf("check: OK: %s equals one process over %d steps\n", what, K);
    free(p_init), free(in), free(tg);
    model_cpu_destroy(&ref);
    return bad ? 1 : 0;
}
