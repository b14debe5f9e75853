# Empty compiler generated dependencies file for tutti-run.
# This may be replaced when dependencies are built.
