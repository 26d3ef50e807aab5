# The source tree's own rules: every tracked C file laid out by
# .clang-format (skips, exit 77, without clang-format or outside a git
# checkout), and no function of src/ over 80 lines.
add_test(NAME format COMMAND ${PROJECT_SOURCE_DIR}/scripts/check-format.sh)
set_tests_properties(format PROPERTIES LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77)
add_test(NAME long_functions COMMAND ${PROJECT_SOURCE_DIR}/scripts/long-functions.sh 80 ${PROJECT_SOURCE_DIR}/src)
set_tests_properties(long_functions PROPERTIES LABELS unit TIMEOUT 60)
