# Topology tests: decisions asserted on hwloc XML fixtures of machines we do not have, plus a
# smoke test of live discovery; included from tests/CMakeLists.txt.
tutti_test(test_topology test_topology.cc)
target_link_libraries(test_topology PRIVATE PkgConfig::HWLOC)
target_compile_definitions(test_topology PRIVATE
  TUTTI_FIXTURES_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fixtures")
gtest_discover_tests(test_topology PROPERTIES LABELS "quick")
