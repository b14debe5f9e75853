# tutti-run launcher tests; included from tests/CMakeLists.txt.
add_executable(test_launcher test_launcher.cc)
target_link_libraries(test_launcher GTest::gtest_main)
target_compile_definitions(test_launcher PRIVATE TUTTI_RUN_PATH="$<TARGET_FILE:tutti-run>")
add_dependencies(test_launcher tutti-run)
gtest_discover_tests(test_launcher)

# tutti-run's placement on CPUs (default binding, --bind none|core|numa, the registry of jobs
# side by side, taskset masks, NUMA placement on a 2-socket fixture), seen from real ranks.
add_executable(test_launcher_bind test_launcher_bind.cc)
target_link_libraries(test_launcher_bind GTest::gtest_main)
target_compile_definitions(test_launcher_bind PRIVATE TUTTI_RUN_PATH="$<TARGET_FILE:tutti-run>"
  TUTTI_FIXTURES_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fixtures")
add_dependencies(test_launcher_bind tutti-run)
gtest_discover_tests(test_launcher_bind PROPERTIES LABELS "quick")
