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
add_test(NAME gpu_fake_cuda COMMAND test_device_gpu)
set_tests_properties(gpu_fake_cuda PROPERTIES LABELS "unit;gpu" TIMEOUT 600
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=2;GPU_TEST_QUICK=1")
add_test(NAME gpu_fake_cuda_fallbacks COMMAND test_device_gpu)
set_tests_properties(gpu_fake_cuda_fallbacks PROPERTIES LABELS "unit;gpu" TIMEOUT 600
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=1;FAKE_CUDA_MEMOPS=0;FAKE_CUDA_REJECT_CUBIN=1;GPU_TEST_QUICK=1")
add_test(NAME gpu_fake_cuda_no_nvrtc COMMAND test_device_gpu)
set_tests_properties(gpu_fake_cuda_no_nvrtc PROPERTIES LABELS "unit;gpu" TIMEOUT 600
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=1;FAKE_CUDA_DELAY_US=0;HETCCL_NVRTC_LIBRARY=none;GPU_TEST_QUICK=1")

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

# GPU memory for net/ib: dma-buf export on the real device, and its
# registration where an RDMA port exists too; exits 77 without a GPU.
add_test(NAME gpu_ib_gdr COMMAND test_ib_gdr)
set_tests_properties(gpu_ib_gdr PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 120)
# The same over the fake libcuda (everywhere): the export's range rules.
add_dependencies(test_ib_gdr hc_fake_cuda)
add_test(NAME gpu_ib_gdr_fake_cuda COMMAND test_ib_gdr)
set_tests_properties(gpu_ib_gdr_fake_cuda PROPERTIES LABELS "unit;gpu" TIMEOUT 120
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=1;HETCCL_NVRTC_LIBRARY=none")
