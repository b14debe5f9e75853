# Empty dependencies file for perf_test_datatypes.
# This may be replaced when dependencies are built.
