# Empty dependencies file for all_reduce_perf.
# This may be replaced when dependencies are built.
