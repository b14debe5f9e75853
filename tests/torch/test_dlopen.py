#!/usr/bin/python3
"""tutti's shared libraries load with dlopen() after torch, as Python extensions and a CUDA
PyTorch loading libnccl.so.2 need: their thread-locals must not require glibc's static-TLS
reserve, which importing torch uses up ("cannot allocate memory in static TLS block").

    /usr/bin/python3 tests/torch/test_dlopen.py BUILD_DIR     (PYTHONPATH=BUILD_DIR/python)

Checks: tutti_torch imports after torch and runs on the project's libtutti.so (mapped from
BUILD_DIR/lib, no private copy of the library inside the module); libnccl.so.2 and libtutti.so
opened with dlopen() after torch answer calls that use their thread-locals (the last error).
"""
import ctypes
import os
import sys

import torch  # noqa: F401  (first, as a trainer does)

import tutti_torch  # noqa: F401  (dlopen()s the module, which needs libtutti.so.0)

NCCL_INVALID_ARGUMENT = 4


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def check_library(path):
    lib = ctypes.CDLL(path)  # raises OSError when its TLS cannot be placed
    version = ctypes.c_int(0)
    assert lib.ncclGetVersion(ctypes.byref(version)) == 0, path
    assert version.value >= 22800, f"{path}: ncclGetVersion gave {version.value}"
    # A refused call records its message in a thread-local: it must come back on this thread.
    comm = ctypes.c_void_p()
    res = lib.ncclCommInitRank(ctypes.byref(comm), 0, UniqueId(), 0)
    assert res == NCCL_INVALID_ARGUMENT, f"{path}: ncclCommInitRank(nranks=0) gave {res}"
    lib.ncclGetLastError.restype = ctypes.c_char_p
    msg = lib.ncclGetLastError(None).decode()
    assert "nranks" in msg, f"{path}: last error {msg!r} does not name nranks"
    print(f"test_dlopen: {path}: loaded after torch, last error {msg!r}", flush=True)


def main():
    lib_dir = os.path.realpath(os.path.join(sys.argv[1], "lib"))
    mapped = {line.split()[-1] for line in open("/proc/self/maps") if "/" in line}
    libtutti = os.path.realpath(os.path.join(lib_dir, "libtutti.so.0"))
    assert libtutti in mapped, f"tutti_torch did not load {libtutti}; mapped: " + ", ".join(
        sorted(m for m in mapped if "tutti" in m or "nccl" in m))
    print(f"test_dlopen: tutti_torch runs on {libtutti}", flush=True)
    check_library(os.path.join(lib_dir, "libnccl.so.2"))
    check_library(os.path.join(lib_dir, "libtutti.so.0"))


if __name__ == "__main__":
    main()
