file(REMOVE_RECURSE
  "../lib/libtutti_perf_bench.a"
  "../lib/libtutti_perf_bench.pdb"
  "CMakeFiles/tutti_perf_bench.dir/bench.c.o"
  "CMakeFiles/tutti_perf_bench.dir/bench.c.o.d"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/tutti_perf_bench.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
