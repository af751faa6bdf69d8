tests/test_tma: tests/test_tma.c common/attention.h \
 /usr/local/cuda/include/cuda_runtime_api.h \
 /usr/local/cuda/include/crt/host_defines.h \
 /usr/local/cuda/include/builtin_types.h \
 /usr/local/cuda/include/device_types.h \
 /usr/local/cuda/include/driver_types.h \
 /usr/local/cuda/include/vector_types.h \
 /usr/local/cuda/include/surface_types.h \
 /usr/local/cuda/include/texture_types.h \
 /usr/local/cuda/include/cuda_device_runtime_api.h common/dtype.h \
 common/tma.h /usr/local/cuda/include/cuda.h tests/harness.h common/gpu.h
common/attention.h:
/usr/local/cuda/include/cuda_runtime_api.h:
/usr/local/cuda/include/crt/host_defines.h:
/usr/local/cuda/include/builtin_types.h:
/usr/local/cuda/include/device_types.h:
/usr/local/cuda/include/driver_types.h:
/usr/local/cuda/include/vector_types.h:
/usr/local/cuda/include/surface_types.h:
/usr/local/cuda/include/texture_types.h:
/usr/local/cuda/include/cuda_device_runtime_api.h:
common/dtype.h:
common/tma.h:
/usr/local/cuda/include/cuda.h:
tests/harness.h:
common/gpu.h:
