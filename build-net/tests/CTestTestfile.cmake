# CMake generated Testfile for 
# Source directory: /work/main/tests
# Build directory: /work/main/build-net/tests
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
include("/work/main/build-net/tests/test_reduce[1]_include.cmake")
include("/work/main/build-net/tests/test_launcher[1]_include.cmake")
include("/work/main/build-net/tests/test_schedule[1]_include.cmake")
