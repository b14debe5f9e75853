// tests/scoped_env.h: one environment variable set for the length of a scope (the settings,
// placement and topology-limit tests).
#pragma once

#include <cstdlib>
#include <string>

class Env {  // one variable, removed at the end of the scope
 public:
  Env(const char *name, const char *value) : name_(name) { setenv(name, value, 1); }
  ~Env() { unsetenv(name_.c_str()); }
  Env(const Env &) = delete;
  Env &operator=(const Env &) = delete;

 private:
  std::string name_;
};
