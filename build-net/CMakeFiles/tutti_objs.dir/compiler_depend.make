# Empty compiler generated dependencies file for tutti_objs.
# This may be replaced when dependencies are built.
