/*
 * fgpu_cuda.h - CUDA driver types for the shim: the toolkit's cuda.h when the
 * Makefile found one (FGPU_HAVE_CUDA_H), cuda_min.h otherwise.  The shim never
 * calls a cuda.h function by name: every real entry point is a pointer looked
 * up in the real driver, so the header only supplies types and constants.
 */
#ifndef FGPU_CUDA_H
#define FGPU_CUDA_H

#ifdef FGPU_HAVE_CUDA_H
#include <cuda.h>
/* Declared by cuda.h only for the driver's own build; the legacy v1 hooks need it. */
typedef unsigned int CUdeviceptr_v1;
#else
#include "cuda_min.h"
#endif

#endif /* FGPU_CUDA_H */
