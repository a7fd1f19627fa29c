// The host's floor for one launch: an empty kernel with 4 parameters (a vector add's), launched
// from C with the driver's cuLaunchKernel (no Python), no sync, on the legacy stream, the
// per-thread stream and a created stream. Two measures of each:
// - sustained: 20,000 launches in a row, the best of 5 runs. These fill the launch queue, so
//   once it is full each launch waits for the GPU to retire a kernel: this is the slower of the
//   CPU's launch rate and the GPU's rate of back-to-back empty kernels.
// - burst: the median of 400 bursts of 64 launches, each timed from an idle GPU (synchronized
//   before, untimed). A burst stays far below the queue's depth: the CPU's own cost.
// Build and run (a GPU machine; libcuda is opened at run time, no CUDA headers needed):
//   cc -O2 -o /tmp/launch_floor benchmarks/launch_floor.c -ldl && /tmp/launch_floor
// bench_launch_parts.py puts tiles' own launch next to this figure.
#include <dlfcn.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef int CUresult; typedef int CUdevice; typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;
static const char *ptx =
".version 8.0\n.target sm_90\n.address_size 64\n"
".visible .entry k(.param .u64 a, .param .u64 b, .param .u64 c, .param .u32 n) { ret; }\n";
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static int cmp(const void *a, const void *b){double x=*(const double*)a, y=*(const double*)b; return (x>y)-(x<y);}
int main(int argc, char **argv) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) { printf("no libcuda\n"); return 1; }
#define F(name, ...) CUresult (*name)(__VA_ARGS__) = dlsym(h, #name)
  F(cuInit, unsigned); F(cuDeviceGet, CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = dlsym(h, "cuDevicePrimaryCtxRetain");
  CUresult (*cuCtxSetCurrent)(CUcontext) = dlsym(h, "cuCtxSetCurrent");
  F(cuModuleLoadData, CUmodule*, const void*); F(cuModuleGetFunction, CUfunction*, CUmodule, const char*);
  F(cuLaunchKernel, CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**, void**);
  CUresult (*cuStreamCreate)(CUstream*, unsigned) = dlsym(h, "cuStreamCreate");
  CUresult (*cuCtxSynchronize)(void) = dlsym(h, "cuCtxSynchronize");
  CUdevice d; CUcontext c; CUmodule m; CUfunction f; CUstream s;
  if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&c, d) || cuCtxSetCurrent(c)) { printf("init failed\n"); return 1; }
  if (cuModuleLoadData(&m, ptx) || cuModuleGetFunction(&f, m, "k")) { printf("load failed\n"); return 1; }
  cuStreamCreate(&s, 1);
  uint64_t a = 0, b = 0, cc = 0; uint32_t n = 1; void *args[4] = {&a, &b, &cc, &n};
  const char *names[3] = {"legacy stream 0", "per-thread stream (0x2)", "created non-blocking stream"};
  CUstream streams[3] = {0, (CUstream)0x2, s};
  enum { BURSTS = 400, BURST = 64 };
  static double samples[BURSTS];
  for (int round = 0; round < 3; round++)
  for (int k = 0; k < 3; k++) {
    int N = 20000;
    cuCtxSynchronize();
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
      double t0 = now();
      for (int i = 0; i < N; i++) cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, streams[k], args, 0);
      double t = (now() - t0) / N * 1e6;
      cuCtxSynchronize();
      if (t < best) best = t;
    }
    for (int r = 0; r < BURSTS; r++) {
      cuCtxSynchronize();
      double t0 = now();
      for (int i = 0; i < BURST; i++) cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, streams[k], args, 0);
      samples[r] = (now() - t0) / BURST * 1e6;
    }
    qsort(samples, BURSTS, sizeof samples[0], cmp);
    printf("round %d %-28s %.2f us a launch sustained, %.2f us in bursts\n", round, names[k], best,
           samples[BURSTS / 2]);
  }
  return 0;
}
