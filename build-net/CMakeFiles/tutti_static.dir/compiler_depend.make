# Empty compiler generated dependencies file for tutti_static.
# This may be replaced when dependencies are built.
