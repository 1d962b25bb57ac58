#pragma once
// The host simulation's stand-in (cuda_runtime.h beside it).
#include "cuda_runtime.h"
