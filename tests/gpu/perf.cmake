# hetccl-perf -G: GPU buffers per rank, over the fake libcuda.so.1
# (gpu.cmake), in comms that mix GPU and CPU ranks; results checked (-c 1:
# inputs copied in, outputs copied back and compared). Ranks are processes
# (hetccl-run), hence label mp.
foreach(case "all_reduce;cuda,host;3" "all_gather;host,cuda;3" "reduce_scatter;cuda;2")
  list(GET case 0 coll)
  list(GET case 1 devices)
  list(GET case 2 n)
  string(REPLACE "," "_" tag ${devices})
  add_test(NAME perf_gpu_fake_${coll}_${tag} COMMAND $<TARGET_FILE:hetccl-run> -n ${n} --timeout 240
           $<TARGET_FILE:hetccl-perf> ${coll} -G ${devices} -b 8 -e 256K -f 64 -n 2 -w 1 -c 1)
  set_tests_properties(perf_gpu_fake_${coll}_${tag} PROPERTIES LABELS "mp;gpu" TIMEOUT 300
    PASS_REGULAR_EXPRESSION "Out of bounds values : 0 OK" FAIL_REGULAR_EXPRESSION "FAILED|failed"
    ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=1;FAKE_CUDA_DELAY_US=0;HETCCL_VENDOR=0;HETCCL_TIMEOUT=120")
endforeach()
# bench/gpu/program_phases over the fake driver: the bench keeps building and
# running, and its two-stream exchange must reduce 1 + 2 on both streams.
add_test(NAME bench_program_phases_fake_cuda COMMAND program_phases)
set_tests_properties(bench_program_phases_fake_cuda PROPERTIES LABELS "gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-cuda;FAKE_CUDA_DEVICES=1;FAKE_CUDA_DELAY_US=0;HETCCL_VENDOR=0")
