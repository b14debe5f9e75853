file(REMOVE_RECURSE
  "../bin/mpi_allreduce_perf"
  "../bin/mpi_allreduce_perf.pdb"
  "CMakeFiles/mpi_allreduce_perf.dir/mpi_allreduce_perf.c.o"
  "CMakeFiles/mpi_allreduce_perf.dir/mpi_allreduce_perf.c.o.d"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/mpi_allreduce_perf.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
