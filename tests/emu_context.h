// Protocol tests through the device emulation: every rank's thread has a current device context,
// as a GPU program's has after cudaSetDevice. Without one the emulation, like CUDA, gives the
// thread no device (no peer path, no small-call path).
#ifndef TUTTI_TESTS_EMU_CONTEXT_H
#define TUTTI_TESTS_EMU_CONTEXT_H

#include <vector>

#include "device.h"
#include "nccl.h"

// The calling thread has a context while this lives (ranks as threads of the test's process).
struct OnDevice {
  OnDevice() { device_emu_set_context(1); }
  ~OnDevice() { device_emu_set_context(0); }
};

// For forked(): the rank's process gets a context before its init.
inline void on_device(int) {
  device_emu_set_context(1);
}

// ncclCommInitAll with every rank on the one emulated device, made while the caller has a
// context: each rank keeps that context, and its proxy binds it whichever thread calls.
inline ncclResult_t init_all_on_device(ncclComm_t *comms, int n) {
  OnDevice on;
  std::vector<int> devs(n, 0);
  return ncclCommInitAll(comms, n, devs.data());
}

#endif
