# Tests of the reference trainer (trainer/); included from tests/CMakeLists.txt.
#   test_trainer_grad  finite-difference gradient checks of every layer and both models (quick)
#   test_cnn_index     the GPU trainer's im2col / col2im / pooling maps vs the host layers (quick)
#   test_trainer_ddp   tutti-train run for real as separate processes under tutti-run:
#                      N ranks x b == 1 rank x N*b, identical parameters on every rank after
#                      every step, resume == uninterrupted bit for bit. TrainerDdpQuick.* use
#                      the MLP (seconds, label quick); TrainerDdpSlow.* the CNN (label slow).
if(NOT TARGET tutti_trainer_nn)
  return()
endif()

add_executable(test_trainer_grad test_trainer_grad.cc)
target_link_libraries(test_trainer_grad PRIVATE tutti_trainer_nn GTest::gtest_main)
gtest_discover_tests(test_trainer_grad PROPERTIES LABELS "quick")

# The GPU trainer's CNN index maps (trainer/cnn_index.h) against the host layers, on the host.
add_executable(test_cnn_index test_cnn_index.cc)
target_link_libraries(test_cnn_index PRIVATE tutti_trainer_nn GTest::gtest_main)
gtest_discover_tests(test_cnn_index PROPERTIES LABELS "quick")

add_executable(test_trainer_ddp test_trainer_ddp.cc)
target_link_libraries(test_trainer_ddp PRIVATE tutti_trainer_nn GTest::gtest_main)
target_compile_definitions(test_trainer_ddp PRIVATE
  TUTTI_RUN_PATH="$<TARGET_FILE:tutti-run>" TUTTI_TRAIN_PATH="$<TARGET_FILE:tutti-train>")
add_dependencies(test_trainer_ddp tutti-run tutti-train)
if(TUTTI_WITH_CUDA) # tutti-train has the GPU trainer (--device cuda)
  target_compile_definitions(test_trainer_ddp PRIVATE TUTTI_TRAIN_CUDA_BUILT)
endif()
gtest_discover_tests(test_trainer_ddp TEST_FILTER "TrainerDdpQuick*"
                     PROPERTIES LABELS "quick" TIMEOUT 300)
gtest_discover_tests(test_trainer_ddp TEST_FILTER "TrainerDdpSlow*"
                     PROPERTIES LABELS "slow" TIMEOUT 1200)
