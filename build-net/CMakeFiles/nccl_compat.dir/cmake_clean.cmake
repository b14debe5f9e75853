file(REMOVE_RECURSE
  "lib/libnccl.pdb"
  "lib/libnccl.so"
  "lib/libnccl.so.2"
  "lib/libnccl.so.2.19.3"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/nccl_compat.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
