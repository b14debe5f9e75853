
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/algos/chain.c" "CMakeFiles/tutti_objs.dir/src/algos/chain.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/algos/chain.c.o.d"
  "/work/main/src/algos/oneshot.c" "CMakeFiles/tutti_objs.dir/src/algos/oneshot.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/algos/oneshot.c.o.d"
  "/work/main/src/algos/p2p.c" "CMakeFiles/tutti_objs.dir/src/algos/p2p.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/algos/p2p.c.o.d"
  "/work/main/src/algos/ring.c" "CMakeFiles/tutti_objs.dir/src/algos/ring.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/algos/ring.c.o.d"
  "/work/main/src/algos/schedule.c" "CMakeFiles/tutti_objs.dir/src/algos/schedule.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/algos/schedule.c.o.d"
  "/work/main/src/bootstrap.c" "CMakeFiles/tutti_objs.dir/src/bootstrap.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/bootstrap.c.o.d"
  "/work/main/src/copy.c" "CMakeFiles/tutti_objs.dir/src/copy.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/copy.c.o.d"
  "/work/main/src/debug.c" "CMakeFiles/tutti_objs.dir/src/debug.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/debug.c.o.d"
  "/work/main/src/engine.c" "CMakeFiles/tutti_objs.dir/src/engine.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/engine.c.o.d"
  "/work/main/src/enqueue.c" "CMakeFiles/tutti_objs.dir/src/enqueue.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/enqueue.c.o.d"
  "/work/main/src/group.c" "CMakeFiles/tutti_objs.dir/src/group.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/group.c.o.d"
  "/work/main/src/init.c" "CMakeFiles/tutti_objs.dir/src/init.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/init.c.o.d"
  "/work/main/src/init_env.c" "CMakeFiles/tutti_objs.dir/src/init_env.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/init_env.c.o.d"
  "/work/main/src/param.c" "CMakeFiles/tutti_objs.dir/src/param.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/param.c.o.d"
  "/work/main/src/reduce.c" "CMakeFiles/tutti_objs.dir/src/reduce.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/reduce.c.o.d"
  "/work/main/src/reduce_simd.c" "CMakeFiles/tutti_objs.dir/src/reduce_simd.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/reduce_simd.c.o.d"
  "/work/main/src/socket.c" "CMakeFiles/tutti_objs.dir/src/socket.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/socket.c.o.d"
  "/work/main/src/split.c" "CMakeFiles/tutti_objs.dir/src/split.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/split.c.o.d"
  "/work/main/src/topology/host.c" "CMakeFiles/tutti_objs.dir/src/topology/host.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/topology/host.c.o.d"
  "/work/main/src/topology/topo_decide.c" "CMakeFiles/tutti_objs.dir/src/topology/topo_decide.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/topology/topo_decide.c.o.d"
  "/work/main/src/topology/topo_dump.c" "CMakeFiles/tutti_objs.dir/src/topology/topo_dump.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/topology/topo_dump.c.o.d"
  "/work/main/src/topology/topo_load.c" "CMakeFiles/tutti_objs.dir/src/topology/topo_load.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/topology/topo_load.c.o.d"
  "/work/main/src/topology/topo_nvml.c" "CMakeFiles/tutti_objs.dir/src/topology/topo_nvml.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/topology/topo_nvml.c.o.d"
  "/work/main/src/topology/topo_path.c" "CMakeFiles/tutti_objs.dir/src/topology/topo_path.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/topology/topo_path.c.o.d"
  "/work/main/src/topology/topo_ring.c" "CMakeFiles/tutti_objs.dir/src/topology/topo_ring.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/topology/topo_ring.c.o.d"
  "/work/main/src/transport/shm.c" "CMakeFiles/tutti_objs.dir/src/transport/shm.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/transport/shm.c.o.d"
  "/work/main/src/transport/tcp.c" "CMakeFiles/tutti_objs.dir/src/transport/tcp.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/transport/tcp.c.o.d"
  "/work/main/src/transport/transport.c" "CMakeFiles/tutti_objs.dir/src/transport/transport.c.o" "gcc" "CMakeFiles/tutti_objs.dir/src/transport/transport.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
