# tests/gpu: the GPU device backends.
#
# On a GPU machine (tests/gpu/run.sh): gpu_device_cuda runs the CUDA backend
# on the real device; it exits 77 (skip) without one.
add_test(NAME gpu_device_cuda COMMAND test_device_gpu)
set_tests_properties(gpu_device_cuda PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 240)

# Everywhere, no GPU needed:
# - the kernel source under the host compiler, against the host kernels, and
#   under NVRTC / hipRTC when their libraries are installed;
add_test(NAME gpu_kernels_host COMMAND test_gpu_kernels ${CMAKE_C_COMPILER})
set_tests_properties(gpu_kernels_host PROPERTIES LABELS "unit;gpu" TIMEOUT 300)

# - the whole backend over a fake libcuda.so.1 (fake_cuda.c) whose kernels
#   are the host emulation of the same source: two devices, stream memory
#   operations, NVRTC if installed; one device whose driver refuses stream
#   memory operations (host functions) and cubins (PTX); one device without
#   NVRTC (host reductions).
add_executable(hc_print_kernels ${CMAKE_CURRENT_SOURCE_DIR}/gpu/print_kernels.c)
target_link_libraries(hc_print_kernels PRIVATE hetccl_static)
add_custom_command(OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/kernels_emu.c
  COMMAND hc_print_kernels ${CMAKE_CURRENT_BINARY_DIR}/kernels_emu.c
  DEPENDS hc_print_kernels VERBATIM)
add_library(hc_fake_cuda SHARED ${CMAKE_CURRENT_SOURCE_DIR}/gpu/fake_cuda.c
  ${CMAKE_CURRENT_BINARY_DIR}/kernels_emu.c)
set_source_files_properties(${CMAKE_CURRENT_BINARY_DIR}/kernels_emu.c PROPERTIES
  COMPILE_OPTIONS "-w;-ffp-contract=off;-fno-fast-math")
target_include_directories(hc_fake_cuda PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(hc_fake_cuda PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
set_target_properties(hc_fake_cuda PROPERTIES OUTPUT_NAME cuda VERSION 1 SOVERSION 1
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake-cuda)
add_dependencies(test_device_gpu hc_fake_cuda)
# - the kernel image cache across processes (tests/gpu/kernel_cache.sh).
add_test(NAME gpu_kernel_cache_fake_cuda COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/kernel_cache.sh
  $<TARGET_FILE:test_device_gpu> ${CMAKE_CURRENT_BINARY_DIR}/fake-cuda)
set_tests_properties(gpu_kernel_cache_fake_cuda PROPERTIES LABELS "unit;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77)
add_test(NAME gpu_fake_cuda COMMAND test_device_gpu)
set_tests_properties(gpu_fake_cuda PROPERTIES LABELS "unit;gpu" TIMEOUT 600
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=2;GPU_TEST_QUICK=1")
add_test(NAME gpu_fake_cuda_fallbacks COMMAND test_device_gpu)
set_tests_properties(gpu_fake_cuda_fallbacks PROPERTIES LABELS "unit;gpu" TIMEOUT 600
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=1;FAKE_CUDA_MEMOPS=0;FAKE_CUDA_REJECT_CUBIN=1;GPU_TEST_QUICK=1")
add_test(NAME gpu_fake_cuda_no_nvrtc COMMAND test_device_gpu)
set_tests_properties(gpu_fake_cuda_no_nvrtc PROPERTIES LABELS "unit;gpu" TIMEOUT 600
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=1;FAKE_CUDA_DELAY_US=0;HETCCL_NVRTC_LIBRARY=none;GPU_TEST_QUICK=1")

# - the HIP backend the same way: a fake libamdhip64.so (fake_hip.c, HIP's
#   entry points as shims over the fake driver, and a fake hipRTC), so the
#   whole backend suite runs through hip.c's table: ROCm 6 pointer types with
#   stream memory operations, and ROCm 5 ones with host functions
#   (hipStreamAddCallback) on a gfx94x-like device.
add_library(hc_fake_hip SHARED ${CMAKE_CURRENT_SOURCE_DIR}/gpu/fake_hip.c ${CMAKE_CURRENT_SOURCE_DIR}/gpu/fake_cuda.c
  ${CMAKE_CURRENT_BINARY_DIR}/kernels_emu.c)
target_include_directories(hc_fake_hip PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(hc_fake_hip PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
set_target_properties(hc_fake_hip PROPERTIES OUTPUT_NAME amdhip64 NO_SONAME ON
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake-hip)
add_dependencies(test_device_gpu hc_fake_hip)
add_test(NAME gpu_fake_hip COMMAND test_device_gpu --kind hip)
set_tests_properties(gpu_fake_hip PROPERTIES LABELS "unit;gpu" TIMEOUT 600
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-hip;FAKE_CUDA_DEVICES=2;GPU_TEST_QUICK=1")
add_test(NAME gpu_fake_hip_rocm5 COMMAND test_device_gpu --kind hip)
set_tests_properties(gpu_fake_hip_rocm5 PROPERTIES LABELS "unit;gpu" TIMEOUT 600
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-hip;FAKE_CUDA_DEVICES=1;FAKE_CUDA_MEMOPS=0;FAKE_HIP_VERSION=50221153;FAKE_HIP_CC_MINOR=4;FAKE_CUDA_DELAY_US=0;GPU_TEST_QUICK=1")

# - where the CUDA toolkit is installed, its stub libcuda (every driver
#   symbol; cuInit fails) stands in for a driver: the backend must resolve
#   every symbol it lists, then stay off quietly.
find_file(HC_CUDA_STUB_LIB libcuda.so
  PATHS /usr/local/cuda/lib64/stubs /usr/local/cuda/targets/x86_64-linux/lib/stubs
  NO_DEFAULT_PATH)
if(HC_CUDA_STUB_LIB)
  set(stub_dir ${CMAKE_CURRENT_BINARY_DIR}/cuda-stub)
  file(MAKE_DIRECTORY ${stub_dir})
  file(CREATE_LINK ${HC_CUDA_STUB_LIB} ${stub_dir}/libcuda.so.1 SYMBOLIC)
  add_test(NAME gpu_cuda_stub_absent COMMAND test_device_gpu --expect-absent)
  set_tests_properties(gpu_cuda_stub_absent PROPERTIES LABELS "unit;gpu" TIMEOUT 60
    ENVIRONMENT "LD_LIBRARY_PATH=${stub_dir}")
endif()

# - where ROCm's headers are installed (Debian's libamdhip64-dev in CI), the
#   constants device/hip_api.h copies are compared with theirs when this
#   object compiles; and the HIP backend loads the real libamdhip64, resolves
#   every entry point and, with no AMD GPU, stays off saying so.
find_path(HC_HIP_HEADER_DIR hip/hip_runtime_api.h PATHS /opt/rocm/include /usr/include NO_DEFAULT_PATH)
if(HC_HIP_HEADER_DIR)
  add_library(hc_hip_constants_check OBJECT ${CMAKE_CURRENT_SOURCE_DIR}/gpu/hip_constants_check.c)
  target_include_directories(hc_hip_constants_check PRIVATE ${HC_HIP_HEADER_DIR} ${PROJECT_SOURCE_DIR}/src)
  # ROCm's headers are not -Wextra clean in C; the check itself is asserts.
  target_compile_options(hc_hip_constants_check PRIVATE -w)
  add_dependencies(test_device_gpu hc_hip_constants_check)
else()
  message(STATUS "hip/hip_runtime_api.h not found: hip_api.h's constants are not checked against ROCm")
endif()
add_test(NAME device_hip_absent COMMAND test_device_gpu --kind hip --expect-absent)
set_tests_properties(device_hip_absent PROPERTIES LABELS "unit;gpu" TIMEOUT 60 SKIP_RETURN_CODE 77)

# - where hipcc is installed (Debian's hipcc, clang-15 with the amdgcn
#   target; not installed by scripts/install-deps.sh, since hipRTC already
#   compiles the kernels in gpu_kernels_host), the same kernel source
#   compiles offline for gfx90a into a code-object bundle. hipRTC gets the
#   HIP runtime's declarations implicitly; hipcc needs them included.
find_program(HC_HIPCC hipcc)
if(HC_HIPCC)
  add_test(NAME gpu_kernels_hipcc COMMAND ${HC_HIPCC} -x hip --offload-arch=gfx90a -ffp-contract=off --genco
           -include hip/hip_runtime.h -o ${CMAKE_CURRENT_BINARY_DIR}/kernels.gfx90a.co
           ${CMAKE_CURRENT_BINARY_DIR}/kernels_emu.c)
  set_tests_properties(gpu_kernels_hipcc PROPERTIES LABELS "unit;gpu" TIMEOUT 120)
endif()
# GPU memory for net/ib: dma-buf export on the real device, and its
# registration where an RDMA port exists too; exits 77 without a GPU.
add_test(NAME gpu_ib_gdr COMMAND test_ib_gdr)
set_tests_properties(gpu_ib_gdr PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 120)
# The same over the fake libcuda (everywhere): the export's range rules.
add_dependencies(test_ib_gdr hc_fake_cuda)
add_test(NAME gpu_ib_gdr_fake_cuda COMMAND test_ib_gdr)
set_tests_properties(gpu_ib_gdr_fake_cuda PROPERTIES LABELS "unit;gpu" TIMEOUT 120
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=1;HETCCL_NVRTC_LIBRARY=none")
