# Empty dependencies file for tutti-run.
# This may be replaced when dependencies are built.
