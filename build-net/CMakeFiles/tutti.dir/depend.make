# Empty dependencies file for tutti.
# This may be replaced when dependencies are built.
