file(REMOVE_RECURSE
  "../lib/libtutti_perf_common.a"
  "../lib/libtutti_perf_common.pdb"
  "CMakeFiles/tutti_perf_common.dir/common.c.o"
  "CMakeFiles/tutti_perf_common.dir/common.c.o.d"
  "CMakeFiles/tutti_perf_common.dir/datatypes.c.o"
  "CMakeFiles/tutti_perf_common.dir/datatypes.c.o.d"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/tutti_perf_common.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
