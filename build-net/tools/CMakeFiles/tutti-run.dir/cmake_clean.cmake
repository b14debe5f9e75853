file(REMOVE_RECURSE
  "../bin/tutti-run"
  "../bin/tutti-run.pdb"
  "CMakeFiles/tutti-run.dir/tutti_run.c.o"
  "CMakeFiles/tutti-run.dir/tutti_run.c.o.d"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/tutti-run.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
