file(REMOVE_RECURSE
  "../bin/test_launcher"
  "../bin/test_launcher.pdb"
  "CMakeFiles/test_launcher.dir/test_launcher.cc.o"
  "CMakeFiles/test_launcher.dir/test_launcher.cc.o.d"
  "test_launcher[1]_tests.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_launcher.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
