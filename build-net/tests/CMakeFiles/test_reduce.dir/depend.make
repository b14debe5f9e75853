# Empty dependencies file for test_reduce.
# This may be replaced when dependencies are built.
