// libFuzzer target for the .npy parser: any byte string must give either an array whose size
// matches its shape or an error message -- never a crash, a leak or undefined behaviour.
// Built and run by `make fuzz FUZZ_SECONDS=60` (clang -fsanitize=fuzzer,address,undefined);
// it links only npy.c, check.c, dtype.c and fileio.c.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    npy_array_t a;
    char err[256];
    err[0] = '\0';
    if (npy_parse(data, size, &a, err, sizeof err) != 0) {
        // A failure always says why, and leaves nothing allocated.
        if (err[0] == '\0' || a.data != NULL) __builtin_trap();
        return 0;
    }
    // Success: the shape accounts for exactly the bytes held, and every check call is safe.
    size_t numel = 1;
    for (int i = 0; i < a.rank; i++) numel *= (size_t)a.shape[i];
    if (a.rank < 0 || a.rank > TENSOR_MAX_RANK || numel * dtype_size(a.dtype) != a.nbytes || !a.data)
        __builtin_trap();
    if (a.nbytes) {
        volatile uint8_t sink = ((const uint8_t*)a.data)[a.nbytes - 1];  // touch the last byte
        (void)sink;
    }
    const int64_t want[TENSOR_MAX_RANK] = {3, -1, 4, -1, 5, -1, 6, -1};
    npy_check(&a, DT_F32, a.rank, want, err, sizeof err);
    npy_check(&a, -1, 2, NULL, err, sizeof err);
    npy_check(&a, (int)a.dtype, a.rank, a.shape, err, sizeof err);
    npy_array_free(&a);
    return 0;
}
