// Umbrella header of the device-side communication building blocks:
//   memory.cuh   scoped loads/stores/fences/atomics (peer data and flags)
//   timeout.cuh  bounded spin-waits that print rank/peer/what and trap
//   window.cuh   peer address of a symmetric-window offset (ncclGetLsaPointer), EP addresses
//   barrier.cuh  EP barrier, grid barrier, NCCL LSA barrier with timeout
//   signal.cuh   per-token completion signals (combine signal mode, fused W2 epilogue)
//   ep_layout.h  host/device structs: window layout, routing tables, local state
#pragma once

#include "dist_moe/device/comm/barrier.cuh"
#include "dist_moe/device/comm/ep_layout.h"
#include "dist_moe/device/comm/memory.cuh"
#include "dist_moe/device/comm/signal.cuh"
#include "dist_moe/device/comm/timeout.cuh"
#include "dist_moe/device/comm/window.cuh"
