# The PyTorch backend's tests (bindings/torch; built when Torch is found), run by Debian's
# /usr/bin/python3 with the module from build/python. tests/torch/launch.py starts the ranks.
if(NOT TUTTI_WITH_TORCH)
  return()
endif()
set(tutti_torch_env "PYTHONPATH=${CMAKE_BINARY_DIR}/python" "OMP_NUM_THREADS=1")
set(tutti_torch_launch ${TUTTI_TORCH_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/torch/launch.py)
foreach(n 1 2 3 4)
  add_test(NAME torch_ops_${n}ranks
           COMMAND ${tutti_torch_launch} -n ${n} --limit 500 ${CMAKE_CURRENT_SOURCE_DIR}/torch/test_ops.py)
  set_tests_properties(torch_ops_${n}ranks PROPERTIES LABELS "slow" TIMEOUT 600
                       ENVIRONMENT "${tutti_torch_env}")
endforeach()
# The same on 2 ranks with every call queued for the group's worker thread (none on the caller's).
add_test(NAME torch_ops_2ranks_worker
         COMMAND ${tutti_torch_launch} -n 2 --limit 500 ${CMAKE_CURRENT_SOURCE_DIR}/torch/test_ops.py)
set_tests_properties(torch_ops_2ranks_worker PROPERTIES LABELS "slow" TIMEOUT 600
                     ENVIRONMENT "${tutti_torch_env};TUTTI_TORCH_INLINE_BYTES=0")
# Random asynchronous operations with up to 5 outstanding, waited for in a drawn order
# (tests/torch/test_soak.py), on 3 ranks, and on 2 with every call queued for the worker.
add_test(NAME torch_soak_3ranks
         COMMAND ${tutti_torch_launch} -n 3 --limit 500 ${CMAKE_CURRENT_SOURCE_DIR}/torch/test_soak.py 1500)
add_test(NAME torch_soak_2ranks_worker
         COMMAND ${tutti_torch_launch} -n 2 --limit 500 ${CMAKE_CURRENT_SOURCE_DIR}/torch/test_soak.py 1500)
set_tests_properties(torch_soak_3ranks PROPERTIES LABELS "slow" TIMEOUT 600
                     ENVIRONMENT "${tutti_torch_env}")
set_tests_properties(torch_soak_2ranks_worker PROPERTIES LABELS "slow" TIMEOUT 600
                     ENVIRONMENT "${tutti_torch_env};TUTTI_TORCH_INLINE_BYTES=0")
add_test(NAME torch_ddp_equals_gloo
         COMMAND ${tutti_torch_launch} -n 2 --limit 500 ${CMAKE_CURRENT_SOURCE_DIR}/torch/test_ddp.py)
add_test(NAME torch_killed_rank
         COMMAND ${tutti_torch_launch} -n 3 --limit 120 --expect-last 3
                 ${CMAKE_CURRENT_SOURCE_DIR}/torch/test_kill.py)
set_tests_properties(torch_ddp_equals_gloo torch_killed_rank PROPERTIES LABELS "slow" TIMEOUT 600
                     ENVIRONMENT "${tutti_torch_env}")
# 2 hosts x 2 ranks on the namespace test bed: every operation across TCP.
add_test(NAME torch_ops_2hosts_x_2ranks
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/torch/multihost.sh ${CMAKE_BINARY_DIR})
set_tests_properties(torch_ops_2hosts_x_2ranks PROPERTIES LABELS "slow" TIMEOUT 900 RUN_SERIAL TRUE)
# libtutti.so and libnccl.so.2 load with dlopen() after torch; the module runs on libtutti.so.
add_test(NAME torch_dlopen_after_torch
         COMMAND ${TUTTI_TORCH_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/torch/test_dlopen.py
                 ${CMAKE_BINARY_DIR})
set_tests_properties(torch_dlopen_after_torch PROPERTIES LABELS "quick" TIMEOUT 120
                     ENVIRONMENT "${tutti_torch_env}")
# DDP communication hooks on the compressed all-reduce (tutti_torch.hooks), 2 ranks.
add_test(NAME torch_compress_hooks
         COMMAND ${tutti_torch_launch} -n 2 --limit 500 ${CMAKE_CURRENT_SOURCE_DIR}/torch/test_hooks.py)
set_tests_properties(torch_compress_hooks PROPERTIES LABELS "slow" TIMEOUT 600
                     ENVIRONMENT "${tutti_torch_env}")
# Huge pages for repeatedly all-reduced heap tensors (bindings/torch/hugepages.cpp): collapsed on
# the second all-reduce of a buffer, results exact; and nothing collapsed when turned off.
add_test(NAME torch_hugepages
         COMMAND ${tutti_torch_launch} -n 2 --limit 200 ${CMAKE_CURRENT_SOURCE_DIR}/torch/test_hugepages.py)
add_test(NAME torch_hugepages_off
         COMMAND ${tutti_torch_launch} -n 2 --limit 200 ${CMAKE_CURRENT_SOURCE_DIR}/torch/test_hugepages.py off)
set_tests_properties(torch_hugepages PROPERTIES LABELS "slow" TIMEOUT 300
                     ENVIRONMENT "${tutti_torch_env}")
set_tests_properties(torch_hugepages_off PROPERTIES LABELS "slow" TIMEOUT 300
                     ENVIRONMENT "${tutti_torch_env};TUTTI_TORCH_HUGEPAGES=0")
