# GPU memory straight to the NIC (test_coll_gdr.c): 2 groups x 2 GPUs on 2
# fake hosts (HETCCL_FAKE_HOSTS) joined by ib over the fake libibverbs
# (tests/ib/fake_verbs.c), GPUs of the fake libcuda, groups on the fake
# NCCL; ranks as threads (the fake verbs connect threads only). Per call,
# results and which bytes went NIC <-> GPU memory without a host copy:
# all of them under HETCCL_GDR=AUTO (dma-buf), or through the peer-memory
# module where the adapter refuses dma-buf and the module is loaded (the
# test makes a sysfs tree saying so), none with staging forced or with an
# adapter that refuses dma-buf and no module (FAKE_VERBS_DMABUF=0). Receives
# into GPU memory end with a flush read on the fake's Ampere (FAKE_CUDA_CC=80,
# HETCCL_GDR_FLUSH=AUTO), none with HETCCL_GDR_FLUSH=0.
set(gdr_env "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda:${CMAKE_CURRENT_BINARY_DIR}/fake-verbs;FAKE_CUDA_DEVICES=2;FAKE_CUDA_CC=80;FAKE_CUDA_DELAY_US=0;HETCCL_TIMEOUT=120;HETCCL_VENDOR=1;HETCCL_NCCL_LIBRARY=${CMAKE_CURRENT_BINARY_DIR}/fake-nccl/libnccl.so.2;TU_RANKS=threads;HETCCL_FAKE_HOSTS=0,0,1,1;HETCCL_NET=IB")
add_dependencies(test_coll_gdr hc_fake_cuda hc_fake_nccl hc_fake_verbs)
add_test(NAME gpu_coll_gdr_fake_verbs COMMAND test_coll_gdr)
set_tests_properties(gpu_coll_gdr_fake_verbs PROPERTIES LABELS "unit;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${gdr_env};GDR_TEST_EXPECT=direct;FAKE_VERBS_LOG=${CMAKE_CURRENT_BINARY_DIR}/gdr_direct.verbs.log")
add_test(NAME gpu_coll_gdr_stage_fake_verbs COMMAND test_coll_gdr)
set_tests_properties(gpu_coll_gdr_stage_fake_verbs PROPERTIES LABELS "unit;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${gdr_env};GDR_TEST_EXPECT=staged;HETCCL_GDR=STAGE;FAKE_VERBS_LOG=${CMAKE_CURRENT_BINARY_DIR}/gdr_stage.verbs.log")
add_test(NAME gpu_coll_gdr_refused_fake_verbs COMMAND test_coll_gdr)
set_tests_properties(gpu_coll_gdr_refused_fake_verbs PROPERTIES LABELS "unit;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${gdr_env};GDR_TEST_EXPECT=staged;FAKE_VERBS_DMABUF=0;FAKE_VERBS_LOG=${CMAKE_CURRENT_BINARY_DIR}/gdr_refused.verbs.log")
add_test(NAME gpu_coll_gdr_peermem_fake_verbs COMMAND test_coll_gdr)
set_tests_properties(gpu_coll_gdr_peermem_fake_verbs PROPERTIES LABELS "unit;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${gdr_env};GDR_TEST_EXPECT=peermem;FAKE_VERBS_DMABUF=0;FAKE_VERBS_PEERMEM=1;FAKE_VERBS_LOG=${CMAKE_CURRENT_BINARY_DIR}/gdr_peermem.verbs.log")
add_test(NAME gpu_coll_gdr_noflush_fake_verbs COMMAND test_coll_gdr)
set_tests_properties(gpu_coll_gdr_noflush_fake_verbs PROPERTIES LABELS "unit;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${gdr_env};GDR_TEST_EXPECT=direct;HETCCL_GDR_FLUSH=0;FAKE_VERBS_LOG=${CMAKE_CURRENT_BINARY_DIR}/gdr_noflush.verbs.log")
# Small messages of GPU memory over ib between a GPU rank and a CPU rank
# (test_ib_small_gdr.c), threads over the fake libcuda and libibverbs:
# no CPU touches the GPU rank's bytes either way; each receive into GPU
# memory ends with one flush read where the flush applies: AUTO on Ampere
# (FAKE_CUDA_CC=80), 1 on Hopper; none under AUTO on Hopper
# (FAKE_CUDA_CC=90) or with HETCCL_GDR_FLUSH=0.
add_dependencies(test_ib_small_gdr hc_fake_cuda hc_fake_verbs)
set(small_gdr_env "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda:${CMAKE_CURRENT_BINARY_DIR}/fake-verbs;FAKE_CUDA_DEVICES=1;FAKE_CUDA_DELAY_US=0;HETCCL_TIMEOUT=60;HETCCL_NVRTC_LIBRARY=none;HETCCL_IB_CHUNK=4K")
add_test(NAME gpu_ib_small_gdr_fake_verbs COMMAND test_ib_small_gdr)
set_tests_properties(gpu_ib_small_gdr_fake_verbs PROPERTIES LABELS "unit;gpu" TIMEOUT 120 SKIP_RETURN_CODE 77
  ENVIRONMENT "${small_gdr_env};FAKE_CUDA_CC=80")
add_test(NAME gpu_ib_small_gdr_noflush_fake_verbs COMMAND test_ib_small_gdr)
set_tests_properties(gpu_ib_small_gdr_noflush_fake_verbs PROPERTIES LABELS "unit;gpu" TIMEOUT 120 SKIP_RETURN_CODE 77
  ENVIRONMENT "${small_gdr_env};FAKE_CUDA_CC=80;HETCCL_GDR_FLUSH=0")
add_test(NAME gpu_ib_small_gdr_hopper_fake_verbs COMMAND test_ib_small_gdr)
set_tests_properties(gpu_ib_small_gdr_hopper_fake_verbs PROPERTIES LABELS "unit;gpu" TIMEOUT 120 SKIP_RETURN_CODE 77
  ENVIRONMENT "${small_gdr_env};FAKE_CUDA_CC=90")
add_test(NAME gpu_ib_small_gdr_forced_fake_verbs COMMAND test_ib_small_gdr)
set_tests_properties(gpu_ib_small_gdr_forced_fake_verbs PROPERTIES LABELS "unit;gpu" TIMEOUT 120 SKIP_RETURN_CODE 77
  ENVIRONMENT "${small_gdr_env};FAKE_CUDA_CC=90;HETCCL_GDR_FLUSH=1")
# The flush where it fails or runs out of room (test_ib_flush_gdr.c): a
# flush read the fake fails fails its receive and the peer's next send, no
# hang; 128 receives landed at once through a flush queue pair of 64 all
# complete with one flush each.
add_dependencies(test_ib_flush_gdr hc_fake_cuda hc_fake_verbs)
add_test(NAME gpu_ib_flush_readfail_fake_verbs COMMAND test_ib_flush_gdr)
set_tests_properties(gpu_ib_flush_readfail_fake_verbs PROPERTIES LABELS "unit;gpu" TIMEOUT 120 SKIP_RETURN_CODE 77
  ENVIRONMENT "${small_gdr_env};HETCCL_GDR_FLUSH=1;FLUSH_TEST=readfail;FAKE_VERBS_READ_FAIL_AFTER=2")
add_test(NAME gpu_ib_flush_full_fake_verbs COMMAND test_ib_flush_gdr)
set_tests_properties(gpu_ib_flush_full_fake_verbs PROPERTIES LABELS "unit;gpu" TIMEOUT 120 SKIP_RETURN_CODE 77
  ENVIRONMENT "${small_gdr_env};HETCCL_GDR_FLUSH=1;FLUSH_TEST=full")
# A GPU rank and a CPU rank in different groups on 2 fake hosts joined by ib
# (test_coll_mixed_gdr.c): send/recv, all-reduce and all-gather at sizes
# around the eager threshold, end to end through the plans; results and how
# the GPU rank's bytes went (no pinned copy, flushed when they land).
add_dependencies(test_coll_mixed_gdr hc_fake_cuda hc_fake_verbs)
set(mixed_gdr_env "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda:${CMAKE_CURRENT_BINARY_DIR}/fake-verbs;FAKE_CUDA_DEVICES=1;FAKE_CUDA_DELAY_US=0;HETCCL_TIMEOUT=120;HETCCL_VENDOR=0;TU_RANKS=threads;HETCCL_FAKE_HOSTS=0,1;HETCCL_NET=IB")
add_test(NAME gpu_coll_mixed_gdr_fake_verbs COMMAND test_coll_mixed_gdr)
set_tests_properties(gpu_coll_mixed_gdr_fake_verbs PROPERTIES LABELS "unit;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${mixed_gdr_env};FAKE_CUDA_CC=80")
add_test(NAME gpu_coll_mixed_gdr_noflush_fake_verbs COMMAND test_coll_mixed_gdr)
set_tests_properties(gpu_coll_mixed_gdr_noflush_fake_verbs PROPERTIES LABELS "unit;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${mixed_gdr_env};FAKE_CUDA_CC=80;HETCCL_GDR_FLUSH=0")
add_test(NAME gpu_coll_mixed_gdr_hopper_fake_verbs COMMAND test_coll_mixed_gdr)
set_tests_properties(gpu_coll_mixed_gdr_hopper_fake_verbs PROPERTIES LABELS "unit;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${mixed_gdr_env};FAKE_CUDA_CC=90")
