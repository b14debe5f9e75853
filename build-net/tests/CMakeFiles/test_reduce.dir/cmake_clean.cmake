file(REMOVE_RECURSE
  "../bin/test_reduce"
  "../bin/test_reduce.pdb"
  "CMakeFiles/test_reduce.dir/test_reduce.cc.o"
  "CMakeFiles/test_reduce.dir/test_reduce.cc.o.d"
  "test_reduce[1]_tests.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_reduce.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
