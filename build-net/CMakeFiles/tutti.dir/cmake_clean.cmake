file(REMOVE_RECURSE
  "lib/libtutti.pdb"
  "lib/libtutti.so"
  "lib/libtutti.so.0"
  "lib/libtutti.so.0.1.0"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/tutti.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
