# Hardening tests of issue 13 that came after test_hardening: the chaos test, TUTTI_CHECKSUM.
#
# The chaos test (test_chaos.cc) on the namespace test bed: needs root; 100 trials of 4 ranks,
# each waits for a failure to be noticed (about 500-900 s in all: slow, and alone, since its
# trials time the ranks' exits). `build/bin/test_chaos` runs it by hand (TUTTI_CHAOS_TRIALS,
# TUTTI_CHAOS_FIRST: trial i uses seed i).
tutti_test(test_chaos test_chaos.cc test_chaos_ranks.cc)
target_compile_definitions(test_chaos PRIVATE TUTTI_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
add_dependencies(test_chaos tutti-run)
gtest_discover_tests(test_chaos PROPERTIES LABELS "slow" RUN_SERIAL TRUE
                     TIMEOUT 3600 DISCOVERY_TIMEOUT 60)

tutti_test(test_crc32c test_crc32c.cc)
gtest_discover_tests(test_crc32c PROPERTIES LABELS "quick")
tutti_e2e_test(test_checksum quick test_checksum.cc)

# The bootstrap root's verdict on a failed round, its own code on real sockets.
tutti_test(test_bootstrap_verdict test_bootstrap_verdict.cc bootstrap_verdict.c)
target_include_directories(test_bootstrap_verdict PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_compile_definitions(test_bootstrap_verdict PRIVATE
                           $<TARGET_PROPERTY:tutti_objs,COMPILE_DEFINITIONS>)
gtest_discover_tests(test_bootstrap_verdict PROPERTIES LABELS "quick")

# Who an error names, and in which call, when a rank dies and others fail because of it (two
# hosts by TUTTI_HOSTID: tcp between them; no root needed).
tutti_e2e_test(test_blame quick test_blame.cc)
