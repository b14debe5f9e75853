# CMake generated Testfile for 
# Source directory: /work/main/tests
# Build directory: /work/main/build-net/tests
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
include("/work/main/build-net/tests/test_reduce[1]_include.cmake")
include("/work/main/build-net/tests/test_launcher[1]_include.cmake")
include("/work/main/build-net/tests/test_schedule[1]_include.cmake")
include("/work/main/build-net/tests/test_collectives_quick[1]_include.cmake")
include("/work/main/build-net/tests/test_collectives_matrix[1]_include.cmake")
add_test([=[nccl_compat_app]=] "/work/main/build-net/bin/nccl_compat_app")
set_tests_properties([=[nccl_compat_app]=] PROPERTIES  LABELS "quick" TIMEOUT "60" _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;43;add_test;/work/main/tests/CMakeLists.txt;0;")
