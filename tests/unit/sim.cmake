# hetccl-sim's presets (tools/sim): byte counts derived from formulas,
# efficiency floors and the H200 measurement in sim_floors.txt.
target_link_libraries(test_sim_presets PRIVATE hetccl_sim_model)
add_test(NAME sim_presets COMMAND test_sim_presets ${CMAKE_CURRENT_SOURCE_DIR}/unit/sim_floors.txt)
set_tests_properties(sim_presets PROPERTIES LABELS unit TIMEOUT 300)
