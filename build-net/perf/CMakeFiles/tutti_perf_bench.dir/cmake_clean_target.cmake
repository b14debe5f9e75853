file(REMOVE_RECURSE
  "../lib/libtutti_perf_bench.a"
)
