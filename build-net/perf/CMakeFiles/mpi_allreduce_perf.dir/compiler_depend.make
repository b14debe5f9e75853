# Empty compiler generated dependencies file for mpi_allreduce_perf.
# This may be replaced when dependencies are built.
