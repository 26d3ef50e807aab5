# net/ib: the verbs layouts (skip without rdma-core's header), and the parts
# of the transport that need no RDMA device. The transport itself runs in
# tests/ib (two soft-RoCE VMs).
add_test(NAME net_ib_layout COMMAND test_net_ib_layout)
set_tests_properties(net_ib_layout PROPERTIES LABELS unit TIMEOUT 30 SKIP_RETURN_CODE 77)
add_test(NAME net_ib COMMAND test_net_ib)
set_tests_properties(net_ib PROPERTIES LABELS unit TIMEOUT 60 ENVIRONMENT "HETCCL_TIMEOUT=20")
