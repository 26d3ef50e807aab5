# net/shm between two forked processes (and two threads): the transport
# contract suite (tests/common/net_contract.c), then every shm path, a stale
# segment, /dev/shm cleanup; prints throughput and latency.
add_test(NAME net_shm COMMAND test_net_shm)
set_tests_properties(net_shm PROPERTIES LABELS unit TIMEOUT 120)
# The same with full-fence publishes (HETCCL_SHM_MEMBARRIER=0: what a
# kernel without membarrier's global expedited fence gets), so that both
# ways of ordering a publish against a sleeper stay covered.
add_test(NAME net_shm_full_fences COMMAND test_net_shm)
set_tests_properties(net_shm_full_fences PROPERTIES LABELS unit TIMEOUT 120 ENVIRONMENT "HETCCL_SHM_MEMBARRIER=0")
