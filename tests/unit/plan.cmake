# The algorithm table (plan/algos.c), HETCCL_ALGO, and hetccl-info --algos
# against the algorithm the planner builds each call with.
add_test(NAME plan_algos COMMAND test_plan_algos $<TARGET_FILE:hetccl-info>)
set_tests_properties(plan_algos PROPERTIES LABELS unit TIMEOUT 120)
