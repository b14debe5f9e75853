file(REMOVE_RECURSE
  "../bin/all_reduce_perf"
  "../bin/all_reduce_perf.pdb"
  "CMakeFiles/all_reduce_perf.dir/all_reduce_perf.c.o"
  "CMakeFiles/all_reduce_perf.dir/all_reduce_perf.c.o.d"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/all_reduce_perf.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
