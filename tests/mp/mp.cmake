# Real processes, started by hetccl-run.
set(run $<TARGET_FILE:hetccl-run>)
set(perf $<TARGET_FILE:hetccl-perf>)
foreach(n 3 4)
  foreach(coll all_reduce all_gather reduce_scatter broadcast reduce alltoall gather scatter sendrecv)
    add_test(NAME mp_${coll}_n${n} COMMAND ${run} -n ${n} --timeout 240 ${perf} ${coll} -b 8 -e 32M -f 4 -n 3 -w 1 -c 1)
    set_tests_properties(mp_${coll}_n${n} PROPERTIES LABELS mp TIMEOUT 300
      PASS_REGULAR_EXPRESSION "Out of bounds values : 0 OK" FAIL_REGULAR_EXPRESSION "FAILED")
  endforeach()
endforeach()
# Broadcast over shm from every root (-r -1), 2 to 8 ranks, out of place and
# in place (hetccl-perf checks both against the root's pattern), at sizes
# around the one-step bound (HETCCL_ONESTEP_BYTES, 4K) and the chain's
# (HETCCL_RING_THRESHOLD, 64K).
foreach(n 2 3 4 5 6 7 8)
  add_test(NAME mp_broadcast_roots_n${n} COMMAND ${run} -n ${n} --timeout 240 ${perf} broadcast -b 1K -e 128K -f 2 -n 2 -w 1 -c 1 -r -1)
  set_tests_properties(mp_broadcast_roots_n${n} PROPERTIES LABELS mp TIMEOUT 300
    PASS_REGULAR_EXPRESSION "Out of bounds values : 0 OK" FAIL_REGULAR_EXPRESSION "FAILED")
endforeach()
# hetccl-run stops every rank when one fails and exits with that code.
add_test(NAME mp_run_failure COMMAND sh -c "${run} -n 3 -- sh -c 'if [ $RANK = 1 ]; then exit 7; fi; sleep 30'; test $? = 7")
set_tests_properties(mp_run_failure PROPERTIES LABELS mp TIMEOUT 60)
add_test(NAME mp_two_hosts COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mp/test_two_hosts.sh ${perf})
set_tests_properties(mp_two_hosts PROPERTIES LABELS mp TIMEOUT 300 SKIP_RETURN_CODE 77)
# hetccl-run --bind core / --cpu-list: each rank runs only on its own CPU.
add_test(NAME mp_run_bind COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mp/test_run_bind.sh ${run})
set_tests_properties(mp_run_bind PROPERTIES LABELS mp TIMEOUT 60)
# Waits that say who is missing: the root and the waiting ranks every 10 s,
# a rank whose root never starts likewise (about 13 s).
add_test(NAME mp_bootstrap_waits COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mp/check_bootstrap_waits.sh ${run} ${perf})
set_tests_properties(mp_bootstrap_waits PROPERTIES LABELS mp TIMEOUT 120)
# A rank that never joins (or a root that never starts): every survivor is
# out within HETCCL_TIMEOUT=6 + 5 s, failing with the rendezvous's verdict.
add_test(NAME mp_missing_rank COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mp/check_missing_rank.sh ${run} ${perf})
set_tests_properties(mp_missing_rank PROPERTIES LABELS mp TIMEOUT 60)
