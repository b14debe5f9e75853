# CMAKE generated file: DO NOT EDIT!
# Timestamp file for compiler generated dependencies management for all_reduce_perf.
