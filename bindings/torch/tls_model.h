/* Force-included (-include) into the module's private copy of the tutti sources: the attribute
 * name tls_model expands to `unused`, so src/'s initial-exec thread-locals become ordinary
 * (global-dynamic) ones, which a dlopen()ed module can always get. See CMakeLists.txt. */
#define tls_model(model) unused
