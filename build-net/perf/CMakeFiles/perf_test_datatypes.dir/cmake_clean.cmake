file(REMOVE_RECURSE
  "../bin/perf_test_datatypes"
  "../bin/perf_test_datatypes.pdb"
  "CMakeFiles/perf_test_datatypes.dir/test_datatypes.c.o"
  "CMakeFiles/perf_test_datatypes.dir/test_datatypes.c.o.d"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/perf_test_datatypes.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
