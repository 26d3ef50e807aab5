# Where the vendor library's calls to its own nccl* names land
# (test_vendor_bindings.c), over the fake NCCL: bound inside it when hetccl
# loads it, handed back by hetccl's exports when the program loaded it
# globally first (as PyTorch's wheel does). -rdynamic: the program exports
# the ABI layer's nccl* as LD_PRELOAD of build/nccl/libhetccl.so would.
set_target_properties(test_vendor_bindings PROPERTIES ENABLE_EXPORTS ON)
add_dependencies(test_vendor_bindings hc_fake_nccl)
foreach(how private global)
  add_test(NAME vendor_bindings_${how} COMMAND test_vendor_bindings ${how})
  set_tests_properties(vendor_bindings_${how} PROPERTIES LABELS "unit;gpu" TIMEOUT 60
    ENVIRONMENT "HETCCL_NCCL_LIBRARY=${CMAKE_CURRENT_BINARY_DIR}/fake-nccl/libnccl.so.2;HETCCL_TIMEOUT=30")
endforeach()
# The same bindings of the real NCCL where the CUDA toolkit installs one
# (its calls need a GPU; its relocations do not).
find_file(HC_REAL_NCCL_LIB libnccl.so.2
  PATHS /usr/local/cuda/lib /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib NO_DEFAULT_PATH)
if(HC_REAL_NCCL_LIB)
  foreach(how private global)
    add_test(NAME vendor_bindings_real_nccl_${how} COMMAND test_vendor_bindings ${how})
    set_tests_properties(vendor_bindings_real_nccl_${how} PROPERTIES LABELS "unit;gpu" TIMEOUT 60
      ENVIRONMENT "HETCCL_NCCL_LIBRARY=${HC_REAL_NCCL_LIB};HETCCL_TIMEOUT=30")
  endforeach()
endif()
