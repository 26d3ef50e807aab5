add_test(NAME params_table COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/unit/check_params.sh
         ${PROJECT_SOURCE_DIR} $<TARGET_FILE:hetccl-info>)
set_tests_properties(params_table PROPERTIES LABELS unit TIMEOUT 30)
# Only the public API leaves the shared library.
add_test(NAME exported_symbols COMMAND sh -c
  "nm -D --defined-only $<TARGET_FILE:hetccl> | awk '{print $3}' | grep -v '^hetccl' | grep -v '^_' && exit 1 || exit 0")
set_tests_properties(exported_symbols PROPERTIES LABELS unit TIMEOUT 30)
