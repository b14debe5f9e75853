# Empty dependencies file for tutti_perf_bench.
# This may be replaced when dependencies are built.
