// The one error type of codec/ and kernels/; defined in kernels/error.h (the lowest layer that
// throws it), so that kernels/ never includes codec/.
#pragma once

#include "kernels/error.h"
