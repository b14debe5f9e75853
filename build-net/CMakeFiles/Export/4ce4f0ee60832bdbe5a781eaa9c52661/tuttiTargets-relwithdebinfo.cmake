#----------------------------------------------------------------
# Generated CMake target import file for configuration "RelWithDebInfo".
#----------------------------------------------------------------

# Commands may need to know the format version.
set(CMAKE_IMPORT_FILE_VERSION 1)

# Import target "tutti::tutti" for configuration "RelWithDebInfo"
set_property(TARGET tutti::tutti APPEND PROPERTY IMPORTED_CONFIGURATIONS RELWITHDEBINFO)
set_target_properties(tutti::tutti PROPERTIES
  IMPORTED_LOCATION_RELWITHDEBINFO "${_IMPORT_PREFIX}/lib/libtutti.so.0.1.0"
  IMPORTED_SONAME_RELWITHDEBINFO "libtutti.so.0"
  )

list(APPEND _cmake_import_check_targets tutti::tutti )
list(APPEND _cmake_import_check_files_for_tutti::tutti "${_IMPORT_PREFIX}/lib/libtutti.so.0.1.0" )

# Import target "tutti::tutti_static" for configuration "RelWithDebInfo"
set_property(TARGET tutti::tutti_static APPEND PROPERTY IMPORTED_CONFIGURATIONS RELWITHDEBINFO)
set_target_properties(tutti::tutti_static PROPERTIES
  IMPORTED_LINK_INTERFACE_LANGUAGES_RELWITHDEBINFO "C"
  IMPORTED_LOCATION_RELWITHDEBINFO "${_IMPORT_PREFIX}/lib/libtutti.a"
  )

list(APPEND _cmake_import_check_targets tutti::tutti_static )
list(APPEND _cmake_import_check_files_for_tutti::tutti_static "${_IMPORT_PREFIX}/lib/libtutti.a" )

# Commands beyond this point should not need to know the version.
set(CMAKE_IMPORT_FILE_VERSION)
