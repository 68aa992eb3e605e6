#!/usr/bin/env python3
"""A training loop that reports each step to the rdmachaos agent on its node, through ctypes.

Run it as the job would run: RDMACHAOS_OBSERVE_SOCKET names the agent's [observe] socket,
RANK/WORLD_SIZE (torchrun sets them) who this process is. The library is found by the loader
(LD_LIBRARY_PATH, or an installed librdmachaos-observe.so) or named by RDMACHAOS_OBSERVE_LIB.
"""
import ctypes
import os
import sys
import time

obs = ctypes.CDLL(os.environ.get("RDMACHAOS_OBSERVE_LIB", "librdmachaos-observe.so"))
obs.rc_observe_begin.restype = ctypes.c_uint64
obs.rc_observe_begin.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
obs.rc_observe_end.argtypes = [ctypes.c_uint64, ctypes.c_int]

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
for step in range(steps):
    token = obs.rc_observe_begin(b"train_step", 4 << 20)  # the step's all-reduced bytes
    time.sleep(0.01)                                       # forward, backward, all-reduce
    obs.rc_observe_end(token, 0)                           # 0: the step completed
