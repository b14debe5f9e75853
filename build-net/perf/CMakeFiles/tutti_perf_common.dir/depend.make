# Empty dependencies file for tutti_perf_common.
# This may be replaced when dependencies are built.
