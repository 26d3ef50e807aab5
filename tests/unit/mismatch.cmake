# Mismatched calls fail on every rank naming both calls (test_coll_mismatch.c):
# ranks as processes over shm, and over sockets. HETCCL_TIMEOUT=20: a hang
# fails the case instead of blocking the run.
add_test(NAME coll_mismatch COMMAND test_coll_mismatch)
set_tests_properties(coll_mismatch PROPERTIES LABELS unit TIMEOUT 300 ENVIRONMENT "HETCCL_TIMEOUT=20")
add_test(NAME coll_mismatch_socket COMMAND test_coll_mismatch)
set_tests_properties(coll_mismatch_socket PROPERTIES LABELS unit TIMEOUT 300
  ENVIRONMENT "HETCCL_TIMEOUT=20;HETCCL_SHM_DISABLE=1")
# GPU windows over the fake libcuda (tests/gpu/gpu.cmake builds it): a GPU
# rank sends, a CPU rank receives through the window and checks the
# signature in its control words; then two GPU ranks (windows only), whose
# progress engines check what their streams received. HETCCL_TIMEOUT=120 as
# for the other fake-driver tests: the GPU rank's init is slow on a loaded
# machine, and the CPU rank's call waits for it; no NVRTC (its kernel builds
# took most of each case's 30 s here).
add_dependencies(test_coll_mismatch hc_fake_cuda)
add_test(NAME coll_mismatch_gpu_window COMMAND test_coll_mismatch --gpu)
set_tests_properties(coll_mismatch_gpu_window PROPERTIES LABELS "unit;gpu" TIMEOUT 300
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=1;FAKE_CUDA_DELAY_US=0;HETCCL_NVRTC_LIBRARY=none;HETCCL_TIMEOUT=120;HETCCL_VENDOR=0")
