# Topology tests: decisions asserted on hwloc XML fixtures of machines we do not have, plus live
# discovery, binding and the XML dump on this machine; included from tests/CMakeLists.txt.
tutti_test(test_topology test_topology.cc)
target_link_libraries(test_topology PRIVATE PkgConfig::HWLOC ${CMAKE_DL_LIBS})
target_compile_definitions(test_topology PRIVATE
  TUTTI_FIXTURES_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fixtures")

# The same file built as a stand-in libnvidia-ml.so.1, first on LD_LIBRARY_PATH under ctest, so
# that NVLink discovery through NVML runs without a GPU.
add_library(tutti_fake_nvml SHARED test_topology.cc)
target_compile_definitions(tutti_fake_nvml PRIVATE TUTTI_FAKE_NVML)
set_target_properties(tutti_fake_nvml PROPERTIES OUTPUT_NAME nvidia-ml VERSION 1 SOVERSION 1
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/fake-nvml)
add_dependencies(test_topology tutti_fake_nvml)
gtest_discover_tests(test_topology PROPERTIES LABELS "quick"
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_BINARY_DIR}/tests/fake-nvml")

# The time limit on loading a topology file (TUTTI_TOPO_LOAD_TIMEOUT).
tutti_test(test_topo_limit test_topo_limit.cc)
target_link_libraries(test_topo_limit PRIVATE PkgConfig::HWLOC)
target_compile_definitions(test_topo_limit PRIVATE
  TUTTI_FIXTURES_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fixtures")
gtest_discover_tests(test_topo_limit PROPERTIES LABELS "quick")
