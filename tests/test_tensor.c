// Tensors: shapes, contiguity, strided copies, poisoning, bf16 conversion, random device buffers.
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/rng.h"
#include "common/tensor.h"
#include "tests/harness.h"

Test(tensor, alloc_shape_and_strides) {
    tensor_t t = tensor_alloc(DEV_CPU, DT_F32, 3, (int64_t[]){2, 3, 5}, MEM_OTHER);
    cr_assert_eq(tensor_numel(&t), 30);
    cr_assert_eq(tensor_nbytes(&t), 120u);
    cr_assert_eq(t.stride[0], 15);
    cr_assert_eq(t.stride[1], 5);
    cr_assert_eq(t.stride[2], 1);
    cr_assert(tensor_is_contiguous(&t));
    char buf[64];
    cr_assert_str_eq(tensor_shape_str(&t, buf, sizeof buf), "[2, 3, 5]");
    tensor_free(&t);
    cr_assert_null(t.data);
}

Test(tensor, strided_view_gathers_on_copy) {
    // a [4, 6] matrix; view its columns 1..3 as a [4, 3] tensor with row stride 6
    float m[24];
    for (int i = 0; i < 24; i++) m[i] = (float)i;
    tensor_t v = tensor_view(m + 1, DEV_CPU, DT_F32, 2, (int64_t[]){4, 3}, (int64_t[]){6, 1});
    cr_assert_not(tensor_is_contiguous(&v));
    tensor_t c = tensor_to(&v, DEV_CPU);
    cr_assert(tensor_is_contiguous(&c));
    const float* o = c.data;
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < 3; j++) cr_assert_eq(o[r * 3 + j], (float)(r * 6 + 1 + j));
    tensor_free(&c);
    // a transposed view: every element moves
    tensor_t tr = tensor_view(m, DEV_CPU, DT_F32, 2, (int64_t[]){6, 4}, (int64_t[]){1, 6});
    tensor_t ct = tensor_to(&tr, DEV_CPU);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 4; j++) cr_assert_eq(((float*)ct.data)[i * 4 + j], m[j * 6 + i]);
    tensor_free(&ct);
}

Test(tensor, poison_is_nan_and_to_host_f32_widens) {
    tensor_t t = tensor_alloc(DEV_CPU, DT_BF16, 1, (int64_t[]){7}, MEM_OTHER);
    tensor_poison(&t);
    tensor_t f = tensor_to_host_f32(&t);
    for (int i = 0; i < 7; i++) cr_assert(isnan(((float*)f.data)[i]));
    tensor_free(&f);
    uint16_t* h = t.data;
    for (int i = 0; i < 7; i++) h[i] = bf16_from_f32((float)i * 0.5f);
    f = tensor_to_host_f32(&t);
    for (int i = 0; i < 7; i++) cr_assert_eq(((float*)f.data)[i], (float)i * 0.5f);
    tensor_free(&f);
    tensor_free(&t);
}

Test(tensor, bf16_rounds_to_nearest_even) {
    cr_assert_eq(bf16_from_f32(1.0f), 0x3F80);
    // 1 + 2^-8 lies exactly halfway between bf16 1.0 and 1 + 2^-7: ties go to even (1.0)
    cr_assert_eq(bf16_from_f32(1.0f + 1.0f / 256), 0x3F80);
    // 1 + 3*2^-8 is halfway between 1+2^-7 (odd mantissa) and 1+2^-6: rounds up to even
    cr_assert_eq(bf16_from_f32(1.0f + 3.0f / 256), 0x3F82);
    cr_assert_eq(bf16_from_f32(-2.0f), 0xC000);
    cr_assert(isnan(f32_from_bf16(bf16_from_f32(NAN))), "NaN stays NaN");
    cr_assert(isinf(f32_from_bf16(bf16_from_f32(INFINITY))));
    cr_assert(isinf(f32_from_bf16(bf16_from_f32(3.4e38f))), "past bf16's max rounds to inf");
}

Test(tensor, copy_rejects_mismatch, .exit_code = 1) {
    tensor_t a = tensor_alloc(DEV_CPU, DT_F32, 1, (int64_t[]){4}, MEM_OTHER);
    tensor_t b = tensor_alloc(DEV_CPU, DT_F32, 1, (int64_t[]){5}, MEM_OTHER);
    tensor_copy(&a, &b);
}

Test(tensor, round_trip_through_gpu) {
    SKIP_WITHOUT_GPU();
    float m[24];
    for (int i = 0; i < 24; i++) m[i] = (float)i - 3.5f;
    tensor_t v = tensor_view(m, DEV_CPU, DT_F32, 2, (int64_t[]){4, 6}, NULL);
    tensor_t d = tensor_to(&v, DEV_CUDA);
    tensor_t back = tensor_to(&d, DEV_CPU);
    cr_assert_eq(memcmp(back.data, m, sizeof m), 0);
    tensor_poison(&d);
    tensor_t pz = tensor_to_host_f32(&d);
    for (int i = 0; i < 24; i++) cr_assert(isnan(((float*)pz.data)[i]));
    tensor_free(&pz);
    tensor_free(&back);
    tensor_free(&d);
}

// tensor_randn_dev: the same normals as the host generator, in fp32 and rounded to bf16. Host
// and GPU normals differ by a few ulp (common/rng.h), so fp32 compares at 1e-5 relative; the
// bf16 copy must equal the GPU's fp32 draw rounded to nearest (checked against the host draw,
// one bf16 ulp, 2^-8 relative, covers a rounding that the few-ulp difference flips).
Test(tensor, randn_dev_matches_host) {
    SKIP_WITHOUT_GPU();
    const size_t n = 4099;
    float* want = malloc(n * sizeof(float));
    rng_t r = rng_make(42);
    rng_fill_normal(&r, want, n, 0.0f, 1.0f);

    float* d32 = tensor_randn_dev(DT_F32, n, 42, MEM_OTHER);
    uint16_t* d16 = tensor_randn_dev(DT_BF16, n, 42, MEM_OTHER);
    cr_assert(d32 && d16);
    float* got = malloc(n * sizeof(float));
    uint16_t* got16 = malloc(n * sizeof(uint16_t));
    CUDA_CHECK(cudaMemcpy(got, d32, n * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(got16, d16, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    ASSERT_ALLCLOSE(got, want, n, 1e-5, 1e-6, "fp32 normals");
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(got16[i], bf16_from_f32(got[i]), "bf16 at %zu is not the rounded fp32 draw", i);
        const float w = f32_from_bf16(bf16_from_f32(want[i]));
        cr_assert(fabsf(f32_from_bf16(got16[i]) - w) <= 0.0079f * fabsf(w) + 1e-6f, "bf16 at %zu", i);
    }
    mem_free(d32);
    mem_free(d16);
    free(want);
    free(got);
    free(got16);
}
