// Everything a tilelang kernel may call: included at the top of every generated kernel.
#pragma once
#include "common.h"
#include "atomic.h"
#include "cast.h"
#include "copy_sm80.h"
#include "gemm_sm80.h"
#include "gemm_sm90.h"
#include "launch.h"
#include "ldst.h"
#include "random.h"
#include "reduce.h"
#include "sync.h"
