# Empty compiler generated dependencies file for test_launcher.
# This may be replaced when dependencies are built.
