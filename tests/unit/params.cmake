add_test(NAME params_table COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/unit/check_params.sh
         ${PROJECT_SOURCE_DIR} $<TARGET_FILE:hetccl-info>)
set_tests_properties(params_table PROPERTIES LABELS unit TIMEOUT 30)
# Only the public API (hetccl*) and the NCCL ABI (nccl*, pnccl*) leave the library.
add_test(NAME exported_symbols COMMAND sh -c
  "nm -D --defined-only $<TARGET_FILE:hetccl> | awk '{print $3}' | grep -vE '^(hetccl|nccl|pnccl)' | grep -v '^_' && exit 1 || exit 0")
set_tests_properties(exported_symbols PROPERTIES LABELS unit TIMEOUT 30)

# The NCCL drop-in: symbols PyTorch imports and nccl.h's functions (both
# lists, and where they come from, are in the repository).
add_test(NAME nccl_symbols COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/unit/check_nccl_symbols.sh
         $<TARGET_FILE:hetccl_nccl> libnccl.so.2
         ${CMAKE_CURRENT_SOURCE_DIR}/unit/torch-cuda-nccl-imports.txt
         ${CMAKE_CURRENT_SOURCE_DIR}/unit/nccl-h-2.28.9-functions.txt)
set_tests_properties(nccl_symbols PROPERTIES LABELS unit TIMEOUT 30)
# The RCCL drop-in: what a ROCm PyTorch imports (the list, and where it
# comes from, is in the repository), SONAME librccl.so.1.
add_test(NAME rccl_symbols COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/unit/check_nccl_symbols.sh
         $<TARGET_FILE:hetccl_rccl> librccl.so.1 ${CMAKE_CURRENT_SOURCE_DIR}/unit/torch-rocm-nccl-imports.txt)
set_tests_properties(rccl_symbols PROPERTIES LABELS unit TIMEOUT 30)
# Built against the real nccl.h where the CUDA toolkit provides one.
find_path(NCCL_HEADER_DIR nccl.h PATHS /usr/local/cuda/include /usr/include NO_DEFAULT_PATH)
find_path(CUDA_RUNTIME_HEADER_DIR cuda_runtime.h PATHS /usr/local/cuda/include /usr/include NO_DEFAULT_PATH)
if(NCCL_HEADER_DIR AND CUDA_RUNTIME_HEADER_DIR)
  add_executable(test_abi_nccl ${CMAKE_CURRENT_SOURCE_DIR}/unit/abi_nccl_test.c)
  target_include_directories(test_abi_nccl PRIVATE ${NCCL_HEADER_DIR} ${CUDA_RUNTIME_HEADER_DIR})
  target_link_libraries(test_abi_nccl PRIVATE hetccl_nccl Threads::Threads)
  add_test(NAME abi_nccl COMMAND test_abi_nccl)
  set_tests_properties(abi_nccl PROPERTIES LABELS unit TIMEOUT 60 ENVIRONMENT "HETCCL_TIMEOUT=30")
else()
  message(STATUS "nccl.h not found: the NCCL ABI test is not built")
endif()
# Bad HETCCL_* names and values, and NCCL_* stand-ins, against hetccl-info
# and a 2-rank comm init under hetccl-run; each case has its own deadline.
add_test(NAME params_env COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/unit/check_params_env.sh
         $<TARGET_FILE:hetccl-info> $<TARGET_FILE:hetccl-run> $<TARGET_FILE:hetccl-perf>)
set_tests_properties(params_env PROPERTIES LABELS unit TIMEOUT 300)
