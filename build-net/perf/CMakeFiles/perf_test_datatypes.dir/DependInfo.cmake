
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/perf/test_datatypes.c" "perf/CMakeFiles/perf_test_datatypes.dir/test_datatypes.c.o" "gcc" "perf/CMakeFiles/perf_test_datatypes.dir/test_datatypes.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build-net/perf/CMakeFiles/tutti_perf_common.dir/DependInfo.cmake"
  "/work/main/build-net/CMakeFiles/tutti.dir/DependInfo.cmake"
  "/work/main/build-net/perf/CMakeFiles/tutti_perf_bench.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
