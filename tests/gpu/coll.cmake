add_test(NAME gpu_coll COMMAND test_coll_gpu)
set_tests_properties(gpu_coll PROPERTIES LABELS gpu TIMEOUT 900 SKIP_RETURN_CODE 77
                     ENVIRONMENT "HETCCL_TIMEOUT=120")
