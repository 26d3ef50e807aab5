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
