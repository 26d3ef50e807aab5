# ctest cases of tests/unit (the binaries are built by tests/CMakeLists.txt,
# which includes this file). Every test_*.c of this folder gets registered:
# the two below that take arguments here, once per configuration; every
# other one once, without arguments, unless another tests/unit/*.cmake file
# registered a ctest of the same name (test_net_shm.c -> net_shm) - that
# check runs at the end of the directory (cmake_language(DEFER)), so the
# order in which the *.cmake files are included does not matter.
# Label "unit"; HETCCL_TIMEOUT=60 so that a hang inside hetccl fails the
# test instead of blocking CI (ctest's TIMEOUT is the backstop).

# Ranks as threads; 2 cores here, so the 1 Mi + 3 count runs only for
# n <= 4 (see the test's header). One more run under small pipeline chunks
# (and 3 scratch slots) so that blocks are cut into many chunks in every
# algorithm; the test itself also makes comms under HETCCL_ALGO=RING, RD,
# TREE and RING with 1 KiB chunks.
foreach(hc_unit_n 1 2 3 4 5 8)
  add_test(NAME coll_host_n${hc_unit_n} COMMAND test_coll_host --ranks ${hc_unit_n})
  set_tests_properties(coll_host_n${hc_unit_n} PROPERTIES LABELS unit TIMEOUT 240
    ENVIRONMENT "HETCCL_TIMEOUT=60")
endforeach()
add_test(NAME coll_host_n3_chunk4k COMMAND test_coll_host --ranks 3)
set_tests_properties(coll_host_n3_chunk4k PROPERTIES LABELS unit TIMEOUT 240
  ENVIRONMENT "HETCCL_TIMEOUT=60;HETCCL_CHUNK_BYTES=4K;HETCCL_SCRATCH_SLOTS=3")

# Copies and reductions from 4 KiB split among 2 helper threads per rank
# (device/host_pool.c), which the 2 cores here would otherwise not get.
add_test(NAME coll_host_n3_helpers COMMAND test_coll_host --ranks 3)
set_tests_properties(coll_host_n3_helpers PROPERTIES LABELS unit TIMEOUT 240
  ENVIRONMENT "HETCCL_TIMEOUT=60;HETCCL_HOST_HELPERS=2;HETCCL_HOST_SPLIT_BYTES=4K")

# Sets HETCCL_TIMEOUT=3 itself: some cases time out on purpose.
add_test(NAME api_errors COMMAND test_api_errors)
set_tests_properties(api_errors PROPERTIES LABELS unit TIMEOUT 120)

function(hc_unit_register_rest)
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_*.c)
  foreach(src ${sources})
    get_filename_component(bin ${src} NAME_WE)
    if(bin STREQUAL "test_coll_host" OR bin STREQUAL "test_api_errors")
      continue()
    endif()
    string(REGEX REPLACE "^test_" "" name ${bin})
    if(NOT TEST ${name} AND NOT TEST ${bin})
      add_test(NAME ${name} COMMAND ${bin})
      set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT 300 ENVIRONMENT "HETCCL_TIMEOUT=60")
    endif()
  endforeach()
endfunction()
if(CMAKE_VERSION VERSION_LESS 3.19)
  hc_unit_register_rest() # other *.cmake files must then come first (they sort before unit.cmake)
else()
  cmake_language(DEFER CALL hc_unit_register_rest)
endif()
