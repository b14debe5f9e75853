# CMake generated Testfile for 
# Source directory: /work/main/perf
# Build directory: /work/main/build-trainer/perf
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
add_test([=[perf_datatypes]=] "/work/main/build-trainer/bin/perf_test_datatypes")
set_tests_properties([=[perf_datatypes]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/perf/CMakeLists.txt;38;add_test;/work/main/perf/CMakeLists.txt;0;")
add_test([=[perf_all_reduce_check_8_1_8]=] "/work/main/build-trainer/bin/tutti-run" "-n" "3" "--timeout" "100" "/work/main/build-trainer/bin/all_reduce_perf" "-b" "8" "-e" "1M" "-f" "8" "-d" "all" "-o" "all" "-n" "1" "-w" "1" "-c" "1")
set_tests_properties([=[perf_all_reduce_check_8_1_8]=] PROPERTIES  TIMEOUT "120" _BACKTRACE_TRIPLES "/work/main/perf/CMakeLists.txt;43;add_test;/work/main/perf/CMakeLists.txt;0;")
add_test([=[perf_all_reduce_check_1000_100000_33333]=] "/work/main/build-trainer/bin/tutti-run" "-n" "3" "--timeout" "100" "/work/main/build-trainer/bin/all_reduce_perf" "-b" "1000" "-e" "100000" "-i" "33333" "-d" "all" "-o" "all" "-n" "1" "-w" "1" "-c" "1")
set_tests_properties([=[perf_all_reduce_check_1000_100000_33333]=] PROPERTIES  TIMEOUT "120" _BACKTRACE_TRIPLES "/work/main/perf/CMakeLists.txt;43;add_test;/work/main/perf/CMakeLists.txt;0;")
