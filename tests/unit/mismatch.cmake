# Mismatched calls fail on every rank naming both calls (test_coll_mismatch.c):
# ranks as processes over shm, and over sockets. HETCCL_TIMEOUT=20: a hang
# fails the case instead of blocking the run.
add_test(NAME coll_mismatch COMMAND test_coll_mismatch)
set_tests_properties(coll_mismatch PROPERTIES LABELS unit TIMEOUT 300 ENVIRONMENT "HETCCL_TIMEOUT=20")
add_test(NAME coll_mismatch_socket COMMAND test_coll_mismatch)
set_tests_properties(coll_mismatch_socket PROPERTIES LABELS unit TIMEOUT 300
  ENVIRONMENT "HETCCL_TIMEOUT=20;HETCCL_SHM_DISABLE=1")
