# Empty compiler generated dependencies file for test_schedule.
# This may be replaced when dependencies are built.
