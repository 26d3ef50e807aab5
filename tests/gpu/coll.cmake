# Collectives with GPU buffers: on the GPU machine for real; everywhere over
# the fake libcuda.so.1 of gpu.cmake (its kernels are the host emulation of
# the same source), which runs every GPU code path of hetccl's own: the
# progress engine, stream flags, windows, staging through pinned slots, kernels.
add_test(NAME gpu_coll COMMAND test_coll_gpu)
set_tests_properties(gpu_coll PROPERTIES LABELS gpu TIMEOUT 900 SKIP_RETURN_CODE 77
                     ENVIRONMENT "HETCCL_TIMEOUT=120")
add_dependencies(test_coll_gpu hc_fake_cuda)
add_test(NAME gpu_coll_fake_cuda COMMAND test_coll_gpu)
set_tests_properties(gpu_coll_fake_cuda PROPERTIES LABELS "unit;gpu" TIMEOUT 600
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=1;FAKE_CUDA_DELAY_US=0;GPU_TEST_QUICK=1;HETCCL_TIMEOUT=120;HETCCL_VENDOR=0;TU_RANKS=threads")
# The same with GPU programs off (HETCCL_GPU_PROGRAM_BYTES=0): every small
# call's work as separate stream operations, as for ranks that share a GPU
# with another process's and for HIP.
add_test(NAME gpu_coll_fake_cuda_no_programs COMMAND test_coll_gpu)
set_tests_properties(gpu_coll_fake_cuda_no_programs PROPERTIES LABELS "unit;gpu" TIMEOUT 600
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=1;FAKE_CUDA_DELAY_US=0;GPU_TEST_QUICK=1;HETCCL_TIMEOUT=120;HETCCL_VENDOR=0;TU_RANKS=threads;HETCCL_GPU_PROGRAM_BYTES=0")
# The GPU rank's kernels compile but load nowhere (the fake driver rejects
# every image): it must withdraw its LL offer at init (api/comm.c:
# ll_offers_confirm) and reduce on the host; a GPU + CPU pair, whose small
# pieces would otherwise travel in the LL form. The host fallback waits for
# the stream in the call, which the cases that hold a stream cannot allow.
add_test(NAME gpu_coll_fake_cuda_no_kernels COMMAND test_coll_gpu)
set_tests_properties(gpu_coll_fake_cuda_no_kernels PROPERTIES LABELS "unit;gpu" TIMEOUT 600
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=1;FAKE_CUDA_DELAY_US=0;FAKE_CUDA_REJECT_CUBIN=1;FAKE_CUDA_REJECT_PTX=1;GPU_TEST_QUICK=1;GPU_TEST_SCENARIOS=B;GPU_TEST_CALLER_BLOCKS=1;HETCCL_TIMEOUT=120;HETCCL_VENDOR=0;TU_RANKS=threads")
# The same with ranks as processes, as on the GPU machine (not under
# ThreadSanitizer, which does not follow a fork of a threaded process).
add_test(NAME gpu_coll_fake_cuda_processes COMMAND test_coll_gpu)
set_tests_properties(gpu_coll_fake_cuda_processes PROPERTIES LABELS "unit;gpu" TIMEOUT 600
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=1;FAKE_CUDA_DELAY_US=0;GPU_TEST_QUICK=1;HETCCL_TIMEOUT=120;HETCCL_VENDOR=0")
# Ranks as processes again, as MPS clients: they run at once on the GPU,
# so the ranks that share it run programs and LL copies across processes
# (api/comm.c, gpu_sharer); a rank that said it time-slices fails the test.
add_test(NAME gpu_coll_fake_cuda_processes_mps COMMAND test_coll_gpu)
set_tests_properties(gpu_coll_fake_cuda_processes_mps PROPERTIES LABELS "unit;gpu" TIMEOUT 600
  FAIL_REGULAR_EXPRESSION "time-slices"
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=1;FAKE_CUDA_DELAY_US=0;FAKE_CUDA_MPS=1;GPU_TEST_QUICK=1;HETCCL_TIMEOUT=120;HETCCL_VENDOR=0;HETCCL_DEBUG=INFO;HETCCL_DEBUG_SUBSYS=API")
# Scenarios E and F (a GPU group on two devices runs the vendor library
# inside) over the fake driver with two devices and the fake NCCL
# (fake_nccl.c: ranks as threads of one process).
add_library(hc_fake_nccl SHARED ${CMAKE_CURRENT_SOURCE_DIR}/gpu/fake_nccl.c)
target_link_libraries(hc_fake_nccl PRIVATE hetccl_static)
target_include_directories(hc_fake_nccl PRIVATE ${PROJECT_SOURCE_DIR}/src)
set_target_properties(hc_fake_nccl PROPERTIES OUTPUT_NAME nccl VERSION 2 SOVERSION 2
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake-nccl)
add_dependencies(test_coll_gpu hc_fake_nccl)
add_test(NAME gpu_coll_fake_nccl COMMAND test_coll_gpu)
set_tests_properties(gpu_coll_fake_nccl PROPERTIES LABELS "unit;gpu" TIMEOUT 600
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=2;FAKE_CUDA_DELAY_US=0;GPU_TEST_QUICK=1;HETCCL_TIMEOUT=120;HETCCL_VENDOR=1;HETCCL_NCCL_LIBRARY=${CMAKE_CURRENT_BINARY_DIR}/fake-nccl/libnccl.so.2;GPU_TEST_SCENARIOS=EF;TU_RANKS=threads")
# Nonblocking comms (config blocking = 0, GPU_TEST_NONBLOCKING): a GPU rank's
# init (its engine side, the vendor comm of E) and finalize (the drain) run
# on the comm's own thread; scenarios B and E, over the fake NCCL.
add_test(NAME gpu_coll_fake_cuda_nonblocking COMMAND test_coll_gpu)
set_tests_properties(gpu_coll_fake_cuda_nonblocking PROPERTIES LABELS "unit;gpu" TIMEOUT 600
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=2;FAKE_CUDA_DELAY_US=0;GPU_TEST_QUICK=1;HETCCL_TIMEOUT=120;HETCCL_VENDOR=1;HETCCL_NCCL_LIBRARY=${CMAKE_CURRENT_BINARY_DIR}/fake-nccl/libnccl.so.2;GPU_TEST_SCENARIOS=BE;GPU_TEST_NONBLOCKING=1;TU_RANKS=threads")
# A comm of CUDA and HIP ranks (GPU_TEST_KINDS=ch) over the fake libcuda
# and the fake libamdhip64 at once: every scenario with the vendors
# alternating, and G, grouped by device kind (one group per vendor).
add_dependencies(test_coll_gpu hc_fake_hip)
add_test(NAME gpu_coll_fake_cuda_hip COMMAND test_coll_gpu)
set_tests_properties(gpu_coll_fake_cuda_hip PROPERTIES LABELS "unit;gpu" TIMEOUT 600
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda:${CMAKE_CURRENT_BINARY_DIR}/fake-hip;FAKE_CUDA_DEVICES=1;FAKE_CUDA_DELAY_US=0;GPU_TEST_QUICK=1;HETCCL_TIMEOUT=120;HETCCL_VENDOR=0;GPU_TEST_KINDS=ch")
# fp8 between a CUDA rank and a gfx94x-like HIP rank (fnuz, derived from the
# device): refused on both ranks.
add_dependencies(test_coll_fp8_vendors hc_fake_cuda hc_fake_hip)
add_test(NAME gpu_fp8_cuda_hip_fake COMMAND test_coll_fp8_vendors)
set_tests_properties(gpu_fp8_cuda_hip_fake PROPERTIES LABELS "unit;gpu" TIMEOUT 120 SKIP_RETURN_CODE 77
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda:${CMAKE_CURRENT_BINARY_DIR}/fake-hip;FAKE_CUDA_DEVICES=1;FAKE_CUDA_DELAY_US=0;FAKE_HIP_CC_MINOR=4;HETCCL_TIMEOUT=60;HETCCL_VENDOR=0")
# A GPU comm whose peer fails (test_gpu_faults.c): two GPU ranks of one host
# exchanging through shm windows only, as processes over the fake driver;
# rank 1 killed, rank 1 stopped (HETCCL_TIMEOUT=3), and an abort from
# another thread while the stream waits on a window counter.
add_dependencies(test_gpu_faults hc_fake_cuda)
foreach(mode kill stop abort)
  add_test(NAME gpu_faults_${mode}_fake_cuda COMMAND test_gpu_faults ${mode})
  set(timeout 120)
  if(mode STREQUAL "stop")
    set(timeout 3)
  endif()
  set_tests_properties(gpu_faults_${mode}_fake_cuda PROPERTIES LABELS "unit;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
    ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=1;FAKE_CUDA_DELAY_US=0;HETCCL_NVRTC_LIBRARY=none;HETCCL_TIMEOUT=${timeout};HETCCL_VENDOR=0")
endforeach()
# kill again where the device has kernels (NVRTC, as on a real machine):
# the call in flight, released after the engine's grace, must end in the
# trap check (the fake's sticky error); and kill_abort, whose survivor
# aborts within the grace: its stream drains and the device still works.
foreach(mode kill kill_abort)
  add_test(NAME gpu_faults_${mode}_kernels_fake_cuda COMMAND test_gpu_faults ${mode})
  set_tests_properties(gpu_faults_${mode}_kernels_fake_cuda PROPERTIES LABELS "unit;gpu" TIMEOUT 300
    SKIP_RETURN_CODE 77
    ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=1;FAKE_CUDA_DELAY_US=0;HETCCL_TIMEOUT=120;HETCCL_VENDOR=0")
endforeach()
# kill once more with each rank on a GPU of its own and 4 KiB calls: each
# call is one program kernel spinning on the window counters, which the
# release must end in the trap.
add_test(NAME gpu_faults_kill_programs_fake_cuda COMMAND test_gpu_faults kill)
set_tests_properties(gpu_faults_kill_programs_fake_cuda PROPERTIES LABELS "unit;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=2;FAKE_CUDA_DELAY_US=0;HETCCL_TIMEOUT=120;HETCCL_VENDOR=0;GPU_FAULTS_OWN_DEVICES=1;HETCCL_GPU_PROGRAM_BYTES=16K")
# kill_abort there too: the survivor's program spins on its peer's LL
# words, not on a counter, and only the release (the trap word's released
# bit) can end it when the survivor aborts within the grace.
add_test(NAME gpu_faults_kill_abort_programs_fake_cuda COMMAND test_gpu_faults kill_abort)
set_tests_properties(gpu_faults_kill_abort_programs_fake_cuda PROPERTIES LABELS "unit;gpu" TIMEOUT 300
  SKIP_RETURN_CODE 77
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=2;FAKE_CUDA_DELAY_US=0;HETCCL_TIMEOUT=120;HETCCL_VENDOR=0;GPU_FAULTS_OWN_DEVICES=1;HETCCL_GPU_PROGRAM_BYTES=16K")
# The same program, more faults: a CPU rank whose GPU peer (windows) is
# killed mid-exchange (cpu_kill); the state dump of a receive stuck on a
# peer that never sends, then abort (dump, sockets so that the engine runs
# the transfer); a receive on a socket from a peer killed meanwhile
# (recv_kill); a peer killed while both wait in the vendor's comm init
# (init_kill), and a vendor comm init that never completes (init_hang,
# HETCCL_TIMEOUT=3), over the fake NCCL's nonblocking init.
add_dependencies(test_gpu_faults hc_fake_nccl)
set(hc_faults_env "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DELAY_US=0;HETCCL_NVRTC_LIBRARY=none")
set(hc_faults_nccl "HETCCL_VENDOR=1;HETCCL_NCCL_LIBRARY=${CMAKE_CURRENT_BINARY_DIR}/fake-nccl/libnccl.so.2;FAKE_CUDA_DEVICES=2")
add_test(NAME gpu_faults_cpu_kill_fake_cuda COMMAND test_gpu_faults cpu_kill)
add_test(NAME gpu_faults_dump_fake_cuda COMMAND test_gpu_faults dump)
add_test(NAME gpu_faults_recv_kill_fake_cuda COMMAND test_gpu_faults recv_kill)
add_test(NAME gpu_faults_init_kill_fake_nccl COMMAND test_gpu_faults init_kill)
add_test(NAME gpu_faults_init_hang_fake_nccl COMMAND test_gpu_faults init_hang)
set_tests_properties(gpu_faults_cpu_kill_fake_cuda gpu_faults_dump_fake_cuda gpu_faults_recv_kill_fake_cuda
  gpu_faults_init_kill_fake_nccl
  gpu_faults_init_hang_fake_nccl PROPERTIES LABELS "unit;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77)
set_tests_properties(gpu_faults_cpu_kill_fake_cuda PROPERTIES
  ENVIRONMENT "${hc_faults_env};FAKE_CUDA_DEVICES=1;HETCCL_TIMEOUT=120;HETCCL_VENDOR=0")
set_tests_properties(gpu_faults_dump_fake_cuda PROPERTIES
  ENVIRONMENT "${hc_faults_env};FAKE_CUDA_DEVICES=1;HETCCL_TIMEOUT=120;HETCCL_VENDOR=0;HETCCL_SHM_DISABLE=1;HETCCL_DUMP_SIGNAL=USR1")
set_tests_properties(gpu_faults_recv_kill_fake_cuda PROPERTIES
  ENVIRONMENT "${hc_faults_env};FAKE_CUDA_DEVICES=1;HETCCL_TIMEOUT=120;HETCCL_VENDOR=0;HETCCL_SHM_DISABLE=1")
set_tests_properties(gpu_faults_init_kill_fake_nccl PROPERTIES
  ENVIRONMENT "${hc_faults_env};${hc_faults_nccl};HETCCL_TIMEOUT=120;FAKE_NCCL_INIT_KILL_RANK=1")
set_tests_properties(gpu_faults_init_hang_fake_nccl PROPERTIES
  ENVIRONMENT "${hc_faults_env};${hc_faults_nccl};HETCCL_TIMEOUT=3")
# The training shapes in 2 groups x 2 GPUs over the fake driver and the
# fake NCCL: FSDP (all-gather + reduce-scatter), MoE (all-to-all, -v),
# pipeline send/recv; the group mates' part must run on the fake NCCL.
add_dependencies(test_coll_shapes hc_fake_cuda hc_fake_nccl)
add_test(NAME gpu_coll_groups_shapes_fake_nccl COMMAND test_coll_shapes)
set_tests_properties(gpu_coll_groups_shapes_fake_nccl PROPERTIES LABELS "unit;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=2;FAKE_CUDA_DELAY_US=0;HETCCL_TIMEOUT=120;HETCCL_VENDOR=1;HETCCL_NCCL_LIBRARY=${CMAKE_CURRENT_BINARY_DIR}/fake-nccl/libnccl.so.2;TU_RANKS=threads")

# The GPU bus ids of the peer table over the fake libcuda, and the rule
# that tells ranks sharing a GPU from it (tests/unit/test_api_peers.c).
add_dependencies(test_api_peers hc_fake_cuda)
add_test(NAME api_peers COMMAND test_api_peers)
set_tests_properties(api_peers PROPERTIES LABELS "unit;gpu" TIMEOUT 120
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=2;FAKE_CUDA_DELAY_US=0;HETCCL_TIMEOUT=60;HETCCL_VENDOR=0")
# The same where the driver says that contexts are MPS clients.
add_test(NAME api_peers_mps COMMAND test_api_peers)
set_tests_properties(api_peers_mps PROPERTIES LABELS "unit;gpu" TIMEOUT 120
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=2;FAKE_CUDA_DELAY_US=0;HETCCL_TIMEOUT=60;HETCCL_VENDOR=0;FAKE_CUDA_MPS=1")
