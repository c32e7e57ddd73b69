// The GPU emulator's runtime API (the second half of kernels/gpu/emulator/emulate.h, which includes it):
// device memory, copies, device queries, errors, streams, events and graph capture.
//
//   - Device memory is host memory (malloc), filled with NaN when fresh; every device-side range
//     a call names must lie inside one allocation (cudaErrorInvalidValue otherwise).
//   - Every operation is synchronous, so streams and events only need to exist, except during a
//     capture: StreamBeginCapture(s) makes the launches and async copies/memsets submitted to s
//     be recorded instead of run (kernel parameters copied at capture, as on a GPU), and
//     StreamEndCapture hands them over as a graph that GraphLaunch replays in order. What the
//     real runtime refuses during a (global mode) capture is refused here too: work submitted to
//     another stream or the legacy stream 0 (cudaErrorStreamCaptureImplicit), synchronous
//     copies/memsets, Malloc/Free and synchronizations (cudaErrorStreamCaptureUnsupported); both
//     invalidate the capture, so StreamEndCapture then fails with
//     cudaErrorStreamCaptureInvalidated. Capturing the legacy stream 0 is refused.
#pragma once

namespace mimi_emu {

// A synchronous call that a capture forbids: invalidates the capture and sets the error.
inline bool refused_during_capture() {
  std::lock_guard lk(state().m);
  if (!state().capturing) return false;
  state().capturing->invalidated = true;
  state().last = cudaErrorStreamCaptureUnsupported;
  return true;
}

inline cudaError_t Malloc(void** p, size_t bytes) {
  if (refused_during_capture()) return cudaErrorStreamCaptureUnsupported;
  void* q = std::malloc(bytes ? bytes : 1);
  if (!q) return set_error(cudaErrorMemoryAllocation);
  std::memset(q, 0xFF, bytes);  // NaN poison
  std::lock_guard lk(state().m);
  state().allocs[uintptr_t(q)] = bytes;
  *p = q;
  return cudaSuccess;
}
// Page-locked host memory: plain host memory here (poisoned like a device allocation).
inline cudaError_t MallocHost(void** p, size_t bytes) {
  if (refused_during_capture()) return cudaErrorStreamCaptureUnsupported;
  void* q = std::malloc(bytes ? bytes : 1);
  if (!q) return set_error(cudaErrorMemoryAllocation);
  std::memset(q, 0xFF, bytes);
  *p = q;
  return cudaSuccess;
}
inline cudaError_t FreeHost(void* p) {
  if (refused_during_capture()) return cudaErrorStreamCaptureUnsupported;
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t Free(void* p) {
  if (refused_during_capture()) return cudaErrorStreamCaptureUnsupported;
  if (!p) return cudaSuccess;
  {
    std::lock_guard lk(state().m);
    if (!state().allocs.erase(uintptr_t(p))) {
      state().last = cudaErrorInvalidValue;
      return cudaErrorInvalidValue;
    }
  }
  std::free(p);
  return cudaSuccess;
}

// --- copies and memsets: the checked operations, then their synchronous and async entry points
inline bool side_ok(bool device, const void* p, size_t bytes) { return !device || bytes == 0 || on_device(p, bytes); }
inline bool dst_on_device(cudaMemcpyKind k) { return k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice; }
inline bool src_on_device(cudaMemcpyKind k) { return k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice; }

inline cudaError_t copy_now(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (!side_ok(dst_on_device(kind), dst, bytes) || !side_ok(src_on_device(kind), src, bytes))
    return set_error(cudaErrorInvalidValue);
  std::lock_guard lk(state().launch);
  if (bytes) std::memcpy(dst, src, bytes);
  return cudaSuccess;
}
inline cudaError_t copy2d_now(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind) {
  if (width > dpitch || width > spitch) return set_error(cudaErrorInvalidValue);
  if (height == 0 || width == 0) return cudaSuccess;
  if (!side_ok(dst_on_device(kind), dst, dpitch * (height - 1) + width) ||
      !side_ok(src_on_device(kind), src, spitch * (height - 1) + width))
    return set_error(cudaErrorInvalidValue);
  std::lock_guard lk(state().launch);
  for (size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  return cudaSuccess;
}
inline cudaError_t memset_now(void* p, int value, size_t bytes) {
  if (!side_ok(true, p, bytes)) return set_error(cudaErrorInvalidValue);
  std::lock_guard lk(state().launch);
  if (bytes) std::memset(p, value, bytes);
  return cudaSuccess;
}

inline cudaError_t Memcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (refused_during_capture()) return cudaErrorStreamCaptureUnsupported;
  return copy_now(dst, src, bytes, kind);
}
inline cudaError_t Memcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                            cudaMemcpyKind kind) {
  if (refused_during_capture()) return cudaErrorStreamCaptureUnsupported;
  return copy2d_now(dst, dpitch, src, spitch, width, height, kind);
}
inline cudaError_t Memset(void* p, int value, size_t bytes) {
  if (refused_during_capture()) return cudaErrorStreamCaptureUnsupported;
  return memset_now(p, value, bytes);
}
// The async forms check their ranges when submitted (as the real runtime does) and again when
// they run (a replayed graph may outlive a buffer).
inline cudaError_t MemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = nullptr) {
  if (!side_ok(dst_on_device(kind), dst, bytes) || !side_ok(src_on_device(kind), src, bytes))
    return set_error(cudaErrorInvalidValue);
  return submit(s, [=] { return copy_now(dst, src, bytes, kind); });
}
inline cudaError_t Memcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                 size_t height, cudaMemcpyKind kind, cudaStream_t s = nullptr) {
  if (width > dpitch || width > spitch) return set_error(cudaErrorInvalidValue);
  return submit(s, [=] { return copy2d_now(dst, dpitch, src, spitch, width, height, kind); });
}
inline cudaError_t MemsetAsync(void* p, int value, size_t bytes, cudaStream_t s = nullptr) {
  if (!side_ok(true, p, bytes)) return set_error(cudaErrorInvalidValue);
  return submit(s, [=] { return memset_now(p, value, bytes); });
}

// --- device queries and errors ----------------------------------------------------------------
inline cudaError_t DeviceSynchronize() {  // every operation is synchronous
  return refused_during_capture() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}
inline cudaError_t GetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline cudaError_t GetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return set_error(cudaErrorInvalidDevice);
  *p = {};
  std::snprintf(p->name, sizeof p->name, "mimi GPU emulator (CPU threads, warp %d): not a GPU", warp_size());
  p->sharedMemPerBlock = kMaxDynamicShared;
  p->warpSize = warp_size();
  p->maxThreadsPerBlock = 1024;
  p->multiProcessorCount = 1;
  return cudaSuccess;
}
inline cudaError_t SetDevice(int d) {
  if (d != 0) return set_error(cudaErrorInvalidDevice);
  return cudaSuccess;
}
inline cudaError_t GetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t GetLastError() {
  std::lock_guard lk(state().m);
  const cudaError_t e = state().last;
  state().last = cudaSuccess;
  return e;
}
inline cudaError_t PeekAtLastError() {
  std::lock_guard lk(state().m);
  return state().last;
}
inline const char* GetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error (emulated)";
    case cudaErrorInvalidValue: return "invalid argument (emulated)";
    case cudaErrorMemoryAllocation: return "out of memory (emulated)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument (emulated)";
    case cudaErrorInvalidDevice: return "invalid device ordinal (emulated)";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle (emulated)";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state (emulated)";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing (emulated)";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture (emulated)";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream (emulated)";
  }
  return "unknown error (emulated)";
}

// --- streams and events -------------------------------------------------------------------------
inline cudaError_t StreamCreate(cudaStream_t* s) {
  *s = new mimi_emu_stream;
  return cudaSuccess;
}
inline cudaError_t StreamDestroy(cudaStream_t s) {
  if (!s) return set_error(cudaErrorInvalidResourceHandle);
  delete s;
  return cudaSuccess;
}
inline cudaError_t StreamSynchronize(cudaStream_t) {
  return refused_during_capture() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}
inline cudaError_t EventCreate(cudaEvent_t* e) {
  *e = nullptr;
  return cudaSuccess;
}
// A timing event holds the host time of its record: the emulator runs each launch when it is
// submitted, so that is when the work before it finished (outside a capture).
inline cudaError_t EventCreateTiming(cudaEvent_t* e) {
  *e = new mimi_emu_event{};
  return cudaSuccess;
}
inline cudaError_t EventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t EventRecord(cudaEvent_t e, cudaStream_t = nullptr) {
  if (e) e->at = std::chrono::steady_clock::now(), e->recorded = true;
  return cudaSuccess;
}
inline cudaError_t EventElapsedTime(float* ms, cudaEvent_t begin, cudaEvent_t end) {
  if (!begin || !end) return set_error(cudaErrorInvalidResourceHandle);
  if (!begin->recorded || !end->recorded) return set_error(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->at - begin->at).count();
  return cudaSuccess;
}
inline cudaError_t EventSynchronize(cudaEvent_t) {
  return refused_during_capture() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}
inline cudaError_t StreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) { return cudaSuccess; }

// --- graph capture and replay -------------------------------------------------------------------
inline cudaError_t StreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode = cudaStreamCaptureModeGlobal) {
  if (!s) return set_error(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot be captured
  std::lock_guard lk(state().m);
  if (state().capturing) {  // one capture at a time (what mimi's plans need)
    state().last = cudaErrorStreamCaptureUnsupported;
    return cudaErrorStreamCaptureUnsupported;
  }
  s->recorded.clear();
  s->invalidated = false;
  state().capturing = s;
  return cudaSuccess;
}
inline cudaError_t StreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  std::lock_guard lk(state().m);
  *status = s && state().capturing == s ? (s->invalidated ? cudaStreamCaptureStatusInvalidated
                                                           : cudaStreamCaptureStatusActive)
                                        : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
inline cudaError_t StreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  std::lock_guard lk(state().m);
  *graph = nullptr;
  if (!s || state().capturing != s) {
    state().last = cudaErrorIllegalState;
    return cudaErrorIllegalState;
  }
  state().capturing = nullptr;
  if (s->invalidated) {
    s->recorded.clear();
    state().last = cudaErrorStreamCaptureInvalidated;
    return cudaErrorStreamCaptureInvalidated;
  }
  *graph = new mimi_emu_graph{std::move(s->recorded)};
  s->recorded.clear();
  return cudaSuccess;
}
inline cudaError_t GraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph) {
  if (!graph) return set_error(cudaErrorInvalidValue);
  *exec = new mimi_emu_graph_exec{graph->work};  // a copy: the graph may be destroyed first
  return cudaSuccess;
}
inline cudaError_t GraphLaunch(cudaGraphExec_t exec, cudaStream_t s = nullptr) {
  if (!exec) return set_error(cudaErrorInvalidValue);
  return submit(s, [exec] {  // the first failure is the launch's, as at the next sync on a GPU
    cudaError_t first = cudaSuccess;
    for (const auto& work : exec->work)
      if (const cudaError_t e = work(); first == cudaSuccess) first = e;
    return first;
  });
}
inline cudaError_t GraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
inline cudaError_t GraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

}  // namespace mimi_emu
