# tutti-sim's model (tools/sim/): closed forms and the fast method against the full simulation.
tutti_test(test_sim test_sim.cc test_sim_compressed.cc)
target_link_libraries(test_sim PRIVATE tutti_sim_model)
gtest_discover_tests(test_sim PROPERTIES LABELS "quick")
