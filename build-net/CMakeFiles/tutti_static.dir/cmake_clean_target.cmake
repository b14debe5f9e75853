file(REMOVE_RECURSE
  "lib/libtutti.a"
)
