# Empty compiler generated dependencies file for nccl_compat.
# This may be replaced when dependencies are built.
