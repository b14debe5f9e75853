# CMake generated Testfile for 
# Source directory: /work/main/perf
# Build directory: /work/main/build-trainer/perf
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
add_test([=[perf_datatypes]=] "/work/main/build-trainer/bin/perf_test_datatypes")
set_tests_properties([=[perf_datatypes]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/perf/CMakeLists.txt;38;add_test;/work/main/perf/CMakeLists.txt;0;")
