# src/topology/: hwloc discovery and placement decisions (included by the root CMakeLists.txt
# after TUTTI_SOURCES is defined; the root links TUTTI_TOPOLOGY_LIBS into the libraries).
find_package(PkgConfig REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)

set(TUTTI_TOPOLOGY_SOURCES
  src/topology/topo_load.c
  src/topology/topo_nvml.c
  src/topology/topo_path.c
  src/topology/topo_decide.c
  src/topology/topo_ring.c
  src/topology/topo_place.c
  src/topology/topo_dump.c
)
list(APPEND TUTTI_SOURCES ${TUTTI_TOPOLOGY_SOURCES})
# The object library is created after this file runs, so hwloc's flags go on the sources.
set_source_files_properties(${TUTTI_TOPOLOGY_SOURCES} PROPERTIES
  INCLUDE_DIRECTORIES "${HWLOC_INCLUDE_DIRS}" COMPILE_OPTIONS "${HWLOC_CFLAGS_OTHER}")
# NVML is opened with dlopen (optional at run time): libdl is part of glibc >= 2.34, and
# CMAKE_DL_LIBS covers older ones.
set(TUTTI_TOPOLOGY_LIBS PkgConfig::HWLOC ${CMAKE_DL_LIBS})
