file(REMOVE_RECURSE
  "../bin/test_schedule"
  "../bin/test_schedule.pdb"
  "CMakeFiles/test_schedule.dir/test_schedule.cc.o"
  "CMakeFiles/test_schedule.dir/test_schedule.cc.o.d"
  "test_schedule[1]_tests.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_schedule.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
