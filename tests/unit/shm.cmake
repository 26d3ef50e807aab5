# net/shm between two forked processes (and two threads): the transport
# contract suite (tests/common/net_contract.c), then every shm path, a stale
# segment, /dev/shm cleanup; prints throughput and latency.
add_test(NAME net_shm COMMAND test_net_shm)
set_tests_properties(net_shm PROPERTIES LABELS unit TIMEOUT 120)
