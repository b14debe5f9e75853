file(REMOVE_RECURSE
  "lib/libtutti.a"
  "lib/libtutti.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/tutti_static.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
