# What a new user does from the README: the example program (examples/),
# which the README shows verbatim, run as 2 local ranks; and the installed
# package, consumed through pkg-config and find_package(hetccl).
add_test(NAME readme_example COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/user/check_readme_example.sh
         ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/examples/allreduce.c)
set_tests_properties(readme_example PROPERTIES LABELS unit TIMEOUT 30)
add_test(NAME example_allreduce COMMAND $<TARGET_FILE:hetccl-run> -n 2 --timeout 100 $<TARGET_FILE:allreduce>)
set_tests_properties(example_allreduce PROPERTIES LABELS mp TIMEOUT 120
  PASS_REGULAR_EXPRESSION "rank 1 of 2: all-reduce sum 3, as expected")
# Installs the build into a temporary prefix, moves it (hetccl.pc and the
# CMake package must not depend on the prefix given at configure time),
# then builds examples/allreduce.c both ways and runs each as 2 ranks.
add_test(NAME install_consumer COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/user/check_install.sh
         ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR}/examples $<TARGET_FILE:hetccl-run> ${CMAKE_C_COMPILER})
set_tests_properties(install_consumer PROPERTIES LABELS mp TIMEOUT 300 SKIP_RETURN_CODE 77)
# The wait statistics each comm logs when freed (exec.h, hc_exec_wait_stats):
# the example makes one all-reduce, so each rank ran one plan.
add_test(NAME exec_wait_stats COMMAND $<TARGET_FILE:hetccl-run> -n 2 --timeout 100 $<TARGET_FILE:allreduce>)
set_tests_properties(exec_wait_stats PROPERTIES LABELS mp TIMEOUT 120
  ENVIRONMENT "HETCCL_DEBUG=INFO;HETCCL_DEBUG_SUBSYS=EXEC"
  PASS_REGULAR_EXPRESSION "rank 0, [a-z ]+: plans run 1; waits for peers [0-9]+(.|\n)*rank 1, [a-z ]+: plans run 1; waits for peers [0-9]+|rank 1, [a-z ]+: plans run 1; waits for peers [0-9]+(.|\n)*rank 0, [a-z ]+: plans run 1; waits for peers [0-9]+"
  FAIL_REGULAR_EXPRESSION "plans run ([02-9]|1[0-9])")
