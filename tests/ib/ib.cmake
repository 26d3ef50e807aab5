# The ib transport on a real verbs stack: two qemu VMs with soft-RoCE
# (tests/ib/rxe_vms.sh), hetccl-perf with checking for every collective with
# two ranks in each VM (shm inside a VM, ib between them), then a peer
# killed mid-collective and a queue pair forced into error, each ending in
# clean errors. About 3 minutes under software CPU emulation; skips (77)
# where the VMs cannot be booted.
add_test(NAME ib_two_vms COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/ib/test_two_vms.sh ${CMAKE_BINARY_DIR})
set_tests_properties(ib_two_vms PROPERTIES LABELS ib TIMEOUT 1800 SKIP_RETURN_CODE 77)
# Without an RDMA port: HETCCL_NET=IB fails init with a message, unset
# falls back to sockets.
add_test(NAME ib_net_choice COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/ib/test_net_choice.sh
  $<TARGET_FILE:hetccl-run> $<TARGET_FILE:hetccl-perf>)
set_tests_properties(ib_net_choice PROPERTIES LABELS mp TIMEOUT 180)
# test_ib_regcache runs inside the VMs (guest_coll.sh); here, without a
# port, it only shows that it skips cleanly.
add_test(NAME ib_regcache_no_device COMMAND test_ib_regcache)
set_tests_properties(ib_regcache_no_device PROPERTIES LABELS unit TIMEOUT 30 SKIP_RETURN_CODE 77)
