# net/ib: the verbs layouts (skip without rdma-core's header), and the parts
# of the transport that need no RDMA device. The transport itself runs in
# tests/ib (two soft-RoCE VMs).
add_test(NAME net_ib_layout COMMAND test_net_ib_layout)
set_tests_properties(net_ib_layout PROPERTIES LABELS unit TIMEOUT 30 SKIP_RETURN_CODE 77)
add_test(NAME net_ib COMMAND test_net_ib)
set_tests_properties(net_ib PROPERTIES LABELS unit TIMEOUT 60 ENVIRONMENT "HETCCL_TIMEOUT=20")
# The NIC nearest each GPU over a fake sysfs tree the test builds
# (net/topo.c; HETCCL_SYSFS_ROOT): no verbs, no GPU.
add_test(NAME net_topo COMMAND test_net_topo)
set_tests_properties(net_topo PROPERTIES LABELS unit TIMEOUT 60)
