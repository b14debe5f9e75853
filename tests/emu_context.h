// Protocol tests through the device emulation: every rank's thread has a current device context,
// as a GPU program's has after cudaSetDevice. Without one the emulation, like CUDA, gives the
// thread no device (no peer path, no small-call path).
#ifndef TUTTI_TESTS_EMU_CONTEXT_H
#define TUTTI_TESTS_EMU_CONTEXT_H

#include "device.h"

// The calling thread has a context while this lives (ranks as threads of the test's process).
struct OnDevice {
  OnDevice() { device_emu_set_context(1); }
  ~OnDevice() { device_emu_set_context(0); }
};

// For forked(): the rank's process gets a context before its init.
inline void on_device(int) {
  device_emu_set_context(1);
}

#endif
