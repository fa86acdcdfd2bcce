/* builtin:cuda: the CUDA runtime calls dispatch.c makes (cuda.h), kept here
 * so that dispatch.c is plain C with no CUDA header. Under emulation the
 * same calls reach emulation.h's host memory. */
#include <stdio.h>
#include <string.h>

#include <mutex>

#include "cuda_common.cuh"

static int failed(cudaError_t e, const char *what, char *why, size_t why_size)
{
    snprintf(why, why_size, "%s: %s", what, cudaGetErrorString(e));
    return -1;
}

int lacs_cuda_device_open(int *max_shared_bytes, char *why, size_t why_size)
{
    int count = 0, device = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return failed(e, "cudaGetDeviceCount", why, why_size);
    if (count < 1) {
        snprintf(why, why_size, "cudaGetDeviceCount: no CUDA device");
        return -1;
    }
    if ((e = cudaGetDevice(&device)) != cudaSuccess)
        return failed(e, "cudaGetDevice", why, why_size);
    if ((e = cudaDeviceGetAttribute(max_shared_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) != cudaSuccess)
        return failed(e, "cudaDeviceGetAttribute", why, why_size);
    return 0;
}

int lacs_cuda_alloc(void **device, size_t bytes, char *why, size_t why_size)
{
    *device = nullptr;
    cudaError_t e = cudaMalloc(device, bytes ? bytes : 16);
    return e == cudaSuccess ? 0 : failed(e, "cudaMalloc", why, why_size);
}

void lacs_cuda_free(void *device)
{
    if (device)
        cudaFree(device);
}

int lacs_cuda_to_device(void *device, const void *host, size_t bytes, char *why, size_t why_size)
{
    cudaError_t e = cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? 0 : failed(e, "cudaMemcpy to the device", why, why_size);
}

int lacs_cuda_to_host(void *host, const void *device, size_t bytes, char *why, size_t why_size)
{
    cudaError_t e = cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? 0 : failed(e, "cudaMemcpy to the host", why, why_size);
}

int lacs_cuda_zero(void *device, size_t bytes, char *why, size_t why_size)
{
    cudaError_t e = cudaMemset(device, 0, bytes);
    return e == cudaSuccess ? 0 : failed(e, "cudaMemset", why, why_size);
}

int lacs_cuda_synchronize(char *why, size_t why_size)
{
    cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? 0 : failed(e, "a kernel failed (cudaDeviceSynchronize)", why, why_size);
}

int lacs_cuda_describe_device(char *text, size_t text_size)
{
#ifdef LACS_CUDA_EMULATION
    snprintf(text, text_size, "emulated on the CPU (optimized/cuda/emulation.h: the kernels' algorithm, no GPU)");
    return 1;
#else
    int count = 0, device = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(text, text_size, "no CUDA device here (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
        return 0;
    }
    if (count < 1) {
        snprintf(text, text_size, "no CUDA device here (cudaGetDeviceCount: 0 devices)");
        return 0;
    }
    cudaDeviceProp p;
    if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&p, device) != cudaSuccess) {
        snprintf(text, text_size, "a CUDA device whose properties cannot be read");
        return 0;
    }
    snprintf(text, text_size, "%s (sm_%d%d, %d SMs)%s", p.name, p.major, p.minor, p.multiProcessorCount,
             p.major >= 8 ? "" : ": builtin:cuda needs sm_80 or later");
    return p.major >= 8;
#endif
}

/* The families' device workspace, kept between calls and grown when a call
 * needs more (cuda.h): a cudaMalloc and cudaFree per call cost milliseconds
 * at the benchmark's sizes and synchronise the device. One per process,
 * taken by one call at a time. */
static std::mutex workspace_lock;
static void *workspace_memory = nullptr;
static size_t workspace_bytes = 0;

void *lacs_cuda_workspace_acquire(size_t bytes)
{
    workspace_lock.lock();
    if (bytes > workspace_bytes) {
        if (workspace_memory)
            cudaFree(workspace_memory);
        workspace_memory = nullptr;
        workspace_bytes = 0;
        if (cudaMalloc(&workspace_memory, bytes) != cudaSuccess) {
            workspace_memory = nullptr;
            workspace_lock.unlock();
            return nullptr;
        }
        workspace_bytes = bytes;
    }
#ifdef LACS_CUDA_EMULATION
    if (workspace_memory) /* every call starts from NaN bytes, as a fresh cudaMalloc does here */
        memset(workspace_memory, 0xFF, bytes);
#endif
    return workspace_memory ? workspace_memory : (bytes == 0 ? &workspace_bytes : nullptr);
}

void lacs_cuda_workspace_release(void)
{
    cudaDeviceSynchronize(); /* the kernels that use it are done before another call takes it */
    workspace_lock.unlock();
}
