# Multi-host tests on the network-namespace test bed (scripts/netns-cluster.sh; needs root,
# skipped otherwise); included from tests/CMakeLists.txt. Label "slow": each test builds its
# own hosts, and the failure tests wait for timeouts on purpose.
tutti_test(test_multihost test_multihost.cc test_multihost_ranks.cc)
target_compile_definitions(test_multihost PRIVATE TUTTI_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
add_dependencies(test_multihost tutti-run)
gtest_discover_tests(test_multihost PROPERTIES LABELS "slow" RUN_SERIAL TRUE TIMEOUT 600
                     DISCOVERY_TIMEOUT 60)

# The hierarchical all-reduce's schedule (src/algos/hier.c), without a network. hier.c is
# compiled in here until the library's TUTTI_SOURCES lists it.
set(tutti_hier_src "")
if(NOT "src/algos/hier.c" IN_LIST TUTTI_SOURCES)
  set(tutti_hier_src ${CMAKE_SOURCE_DIR}/src/algos/hier.c)
endif()
tutti_test(test_multihost_sched test_multihost_sched.cc ${tutti_hier_src})
gtest_discover_tests(test_multihost_sched PROPERTIES LABELS "quick")
