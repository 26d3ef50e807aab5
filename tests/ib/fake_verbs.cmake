# A fake libibverbs.so.1 (fake_verbs.c): one InfiniBand device emulated
# between the threads of one process, recording every registration and
# RDMA write (FAKE_VERBS_LOG, and counters a test reads). Used here by the
# transport contract suite, and by the GPU-memory-to-NIC tests of
# tests/gpu/gdr.cmake over the fake libcuda.
add_library(hc_fake_verbs SHARED ${CMAKE_CURRENT_SOURCE_DIR}/ib/fake_verbs.c)
target_include_directories(hc_fake_verbs PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(hc_fake_verbs PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
set_target_properties(hc_fake_verbs PROPERTIES OUTPUT_NAME ibverbs VERSION 1 SOVERSION 1
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake-verbs)
add_dependencies(test_ib_fake hc_fake_verbs)
add_test(NAME ib_fake_verbs_contract COMMAND test_ib_fake)
set_tests_properties(ib_fake_verbs_contract PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake-verbs;HETCCL_TIMEOUT=60")
