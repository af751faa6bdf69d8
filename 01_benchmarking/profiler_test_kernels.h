// Known kernels for the profiler's test: see profiler_test_kernels.cu. Device pointers.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

void ptk_alpha(float* x, int n);  // x *= 2, one launch of ptk_alpha_kernel
void ptk_beta(float* x, int n);   // x += 1, one launch of ptk_beta_kernel
void ptk_spin_ms(double ms);      // one launch of ptk_spin_kernel, busy for `ms` on the GPU

#ifdef __cplusplus
}
#endif
