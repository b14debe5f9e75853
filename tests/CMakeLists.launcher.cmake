# tutti-run launcher tests; included from tests/CMakeLists.txt.
add_executable(test_launcher test_launcher.cc)
target_link_libraries(test_launcher GTest::gtest_main)
target_compile_definitions(test_launcher PRIVATE TUTTI_RUN_PATH="$<TARGET_FILE:tutti-run>")
add_dependencies(test_launcher tutti-run)
gtest_discover_tests(test_launcher)
