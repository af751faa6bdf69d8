// Stage 03 plugged into the model (the chain to the stage before): the Transformer's forward
// with flash_attention_fwd_impl() gives the same logits as with the model's own naive
// attention, fp32 and bf16, on a ragged sequence length.
#include <stdlib.h>
#include "common/model_gpu.h"
#include "03_flashattn_fwd/test_util.h"

// hs: the head dim (0: tiny's 16; 64 or 128: tiny with 2 heads of that size, where the bf16
// default is the fa3 kernel).
static void compare(model_precision_t prec, double tol, int hs) {
    SKIP_WITHOUT_GPU();
    model_config_t cfg;
    cr_assert_eq(model_config_by_name("tiny", 128, &cfg), 0);
    if (hs) cfg.n_heads = 2, cfg.d_model = 2 * hs;
    const int B = 2, T = 77;  // T not a tile multiple
    char err[256];
    model_gpu_t* naive = model_gpu_create(&cfg, B, T, prec, NULL, 1234, err, sizeof err);
    cr_assert_not_null(naive, "%s", err);
    model_gpu_t* flash = model_gpu_create(&cfg, B, T, prec, flash_attention_fwd_impl(), 1234, err, sizeof err);
    cr_assert_not_null(flash, "%s", err);
    int32_t* tok = malloc(sizeof(int32_t) * B * T);
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)rng_below(77, (uint64_t)i, (uint32_t)cfg.vocab);
    model_gpu_set_tokens(naive, tok, tok);
    model_gpu_set_tokens(flash, tok, tok);
    const float loss_n = model_gpu_forward(naive, model_gpu_inputs(naive), model_gpu_targets(naive));
    const float loss_f = model_gpu_forward(flash, model_gpu_inputs(flash), model_gpu_targets(flash));
    const size_t n = (size_t)B * T * cfg.vocab;
    float* ln = poisoned_f32(n);
    float* lf = poisoned_f32(n);
    model_gpu_get_logits(naive, ln);
    model_gpu_get_logits(flash, lf);
    ASSERT_ALLCLOSE(lf, ln, n, tol, tol, "logits, flash vs naive attention");
    ASSERT_ALLCLOSE(&loss_f, &loss_n, 1, tol, tol, "loss, flash vs naive attention");
    free(tok), free(ln), free(lf);
    model_gpu_destroy(naive);
    model_gpu_destroy(flash);
}

// fp32: the two attentions differ only in summation order and exp2 vs exp: 1e-4.
Test(model, flash_forward_matches_naive_fp32) { compare(MP_FP32, 1e-4, 0); }
// bf16: P is rounded to bf16 at different points in the two (and O too): 3e-2 on logits.
Test(model, flash_forward_matches_naive_bf16) { compare(MP_BF16, 3e-2, 0); }
// The same where the default is fa3 (TMA on the model's strided views of its fused QKV buffer).
Test(model, flash_forward_matches_naive_bf16_hs64) { compare(MP_BF16, 3e-2, 64); }
Test(model, flash_forward_matches_naive_bf16_hs128) { compare(MP_BF16, 3e-2, 128); }
