// Dist-MoE umbrella header: the framework-free host API.
#pragma once

#include "dist_moe/config.h"
#include "dist_moe/dtype.h"
#include "dist_moe/error.h"
#include "dist_moe/memory_plan.h"
#include "dist_moe/version.h"
