// The C API of the CUDA FlashAttention-2 forward: argument checks (flash_fwd_supports),
// dispatch by dtype (flash_forward_cuda) and the attention_impl_t the model plugs in.
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include "common/check.h"
#include "03_flashattn_fwd/flash_fwd.h"
#include "03_flashattn_fwd/flash_fwd_internal.h"

static int strides_ok(const int64_t s[3], int64_t mult) {
    for (int i = 0; i < 3; i++)
        if (s[i] < 0 || s[i] % mult != 0) return 0;
    return 1;
}

// Shapes, dtype and strides only: the model asks before its buffers exist (pointers NULL).
// Pointers and their alignment are checked by flash_fwd_check_call() when a call is about to run.
int flash_fwd_supports(const attn_args_t* a, char* err, size_t errlen) {
    if (!a) return set_err(err, errlen, "flash forward: no arguments");
    if (a->d != 16 && a->d != 32 && a->d != 64 && a->d != 128)
        return set_err(err, errlen, "flash forward: head dim %d not supported (allowed: 16, 32, 64, 128)", a->d);
    if (a->dtype != DT_F32 && a->dtype != DT_BF16)
        return set_err(err, errlen, "flash forward: dtype %s not supported (allowed: f32, bf16)",
                      (unsigned)a->dtype < DT_COUNT ? dtype_name(a->dtype) : "unknown");
    if (a->B < 1 || a->H < 1 || a->Nq < 1 || a->Nk < 1)
        return set_err(err, errlen, "flash forward: sizes must be >= 1 (B %d, H %d, Nq %d, Nk %d)", a->B, a->H,
                      a->Nq, a->Nk);
    if (!(a->scale > 0.0f) || !isfinite(a->scale))
        return set_err(err, errlen, "flash forward: scale must be positive and finite (got %g)", (double)a->scale);
    const int bq = a->dtype == DT_BF16 ? flash_fwd_bf16_block_rows(a->d) : flash_fwd_f32_block_rows(a->d);
    const int64_t blocks = (int64_t)((a->Nq + bq - 1) / bq) * a->B * a->H;
    if ((int64_t)a->B * a->H > INT32_MAX || blocks > INT32_MAX)
        return set_err(err, errlen, "flash forward: grid of %lld blocks exceeds 2^31 - 1", (long long)blocks);
    if (a->dtype == DT_BF16) {
        // cp.async moves 16-byte chunks (8 bf16): every row must start 16-byte aligned.
        if (!strides_ok(a->sq, 8) || !strides_ok(a->sk, 8) || !strides_ok(a->sv, 8) || !strides_ok(a->so, 2))
            return set_err(err, errlen,
                          "flash forward: bf16 strides must be non-negative multiples of 8 elements for q, k, v "
                          "and of 2 for o");
    } else {
        if (!strides_ok(a->sq, 1) || !strides_ok(a->sk, 1) || !strides_ok(a->sv, 1) || !strides_ok(a->so, 1))
            return set_err(err, errlen, "flash forward: strides must be non-negative");
    }
    return 0;
}

int flash_fwd_check_call(const attn_args_t* a, char* err, size_t errlen) {
    if (flash_fwd_supports(a, err, errlen) != 0) return -1;
    if (!a->q || !a->k || !a->v || !a->o || !a->lse)
        return set_err(err, errlen, "flash forward: q, k, v, o and lse must all be device pointers (one is NULL)");
    // cp.async moves 16-byte chunks; o is written two bf16 at a time
    if (a->dtype == DT_BF16 &&
        (((uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v) % 16 != 0 || (uintptr_t)a->o % 4 != 0))
        return set_err(err, errlen, "flash forward: bf16 q, k, v must be 16-byte aligned and o 4-byte aligned");
    return 0;
}

void flash_forward_cuda(const attn_args_t* a, cudaStream_t stream) {
    char err[256];
    if (flash_fwd_check_call(a, err, sizeof err) != 0) fail("%s", err);
    if (a->dtype == DT_BF16)
        flash_fwd_bf16_launch(a, stream);
    else
        flash_fwd_f32_launch(a, stream);
}

static const attention_impl_t flash_impl = {
    .name = "flash2_fwd",
    .supports = flash_fwd_supports,
    .forward = flash_forward_cuda,
    .backward = NULL,
    .bwd_workspace_bytes = NULL,
};

const attention_impl_t* flash_attention_fwd_impl(void) { return &flash_impl; }

int flash_fwd_select_variants(const char* list, int* chosen, char* err, size_t errlen) {
    int sel[129] = {0}, set[129] = {0};
    for (const char* p = list ? list : ""; *p;) {  // "d:v,d:v"; nothing is selected until all parse
        int dd = 0, vv = 0, used = 0;
        if (sscanf(p, "%d:%d%n", &dd, &vv, &used) != 2 || (dd != 16 && dd != 32 && dd != 64 && dd != 128) || vv < 0 ||
            (p[used] != ',' && p[used] != '\0'))
            return set_err(err, errlen,
                           "expected a list like 64:2,128:1 (head dim 16|32|64|128 : variant >= 0), got '%s'", list);
        const flash_variant_t* vl;
        const int n = flash_fwd_bf16_variants(dd, &vl);
        if (vv >= n) return set_err(err, errlen, "head dim %d has %d variants (0 .. %d), got %d", dd, n, n - 1, vv);
        sel[dd] = vv, set[dd] = 1;
        p += used;
        if (*p == ',') p++;
    }
    for (int d = 0; d <= 128; d++)
        if (set[d]) {
            flash_fwd_bf16_set_variant(d, sel[d]);
            if (chosen) chosen[d] = sel[d];
        }
    return 0;
}
