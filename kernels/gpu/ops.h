// The GPU backend (CUDA, or HIP from the same source): every op of kernels/ops.h on device
// pointers, plus the little runtime the tests and plans need. Built with -DMIMI_CUDA=ON (or
// MIMI_HIP); absent otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/ops.h"

namespace mimi::gpu {

MIMI_DECLARE_OPS
MIMI_DECLARE_MEMORY_OPS  // device memory

// Fused linear layers (codec/device.h FusedOps): bitwise linear() followed by gelu_erf() or by
// layer_scale_add(), without the pass over the intermediate [out, T] result.
//   y [out, T] = gelu_erf(W [out, in] * x [in, T])
void linear_gelu(int64_t in, int64_t out, int64_t T, const float* W, const float* x, float* y);
//   y [out, T] += scale[out] * (W [out, in] * x [in, T])
void linear_scale_add(int64_t in, int64_t out, int64_t T, const float* W, const float* x, const float* scale,
                      float* y);

//   y [out, T] = W [out, in] * layer_norm(x [in, T]) (gelu: then gelu_erf), bitwise layer_norm
//   then linear (linear_gelu); stats: [2, T] floats of workspace (the columns' mean and 1/std)
void layer_norm_linear(int64_t in, int64_t out, int64_t T, const float* W, const float* x, const float* gamma,
                       const float* beta, float eps, bool gelu, float* stats, float* y);

// The transformer's per-slot attention work of a batched step as two launches for every slot
// (codec/device.h FusedOps), on key/value rings: slot s's keys and values live in
// ring_k/ring_v [slots, H*hd, R], the key of absolute position p in column p mod R, so a window
// never moves (R >= context - 1 + the most columns a slot has in a step: the window's cached keys
// and the step's new ones never share a column). segs: nseg WindowSegment in device memory,
// max_len >= every segment's length.
//   rope_append: qkv [3*H*hd, Tt] (q, k, v rows): RoPE on each segment's q columns in place (as
//   rope() at the segment's position, bitwise), its k columns rotated into its slot's ring_k and
//   its v columns copied into ring_v.
void rope_append(int64_t H, int64_t hd, int64_t Tt, int64_t nseg, int64_t max_len, const WindowSegment* segs,
                 float max_period, RopeLayout layout, float* qkv, float* ring_k, float* ring_v, int64_t R);
//   attention_window: out [H*hd, Tt] (not q) = for each segment's queries (q [H*hd, Tt],
//   rotated) attention over its slot's ring: query t at absolute position p = position + t sees
//   the keys of positions max(0, p - context + 1) .. p. Bitwise attention() over the same keys
//   laid out in order (the same kernels, reading the ring).
void attention_window(int64_t H, int64_t hd, int64_t Tt, int64_t nseg, int64_t max_len, const WindowSegment* segs,
                      int64_t context, float scale, const float* q, const float* ring_k, const float* ring_v,
                      int64_t R, float* out);

// A batched step's causal conv for every stream slot at once (codec/device.h FusedOps): nseg
// segments of s.length_in = T inputs each side by side, x [Cin, nseg * T] (segment i in columns
// [i*T, (i+1)*T)), y [Cout, nseg * T_out] likewise (= or += with accumulate, + bias). Segment i
// continues the stream of slot segs[i].slot: its context (conv1d's, raw inputs) is
// contexts + slot * Cin * P, of contexts [slots, Cin, P], P = s.pad_left() > 0; after the conv it
// becomes the last P of [context | the segment's inputs]. Every output column is bitwise conv1d's
// for that segment alone with that context. y must not overlap x or contexts.
void conv1d_segments(const Conv1dShape& s, int64_t nseg, const WindowSegment* segs, const float* x, const float* w,
                     const float* bias, float* y, bool accumulate, float* contexts);

// The same for a causal transposed conv with its carried overlap (codec/layer_steps.h convtr_step):
// x [Cin, nseg * T] (s.length_in = T per segment), y [Cout, nseg * T * S] = each segment's trimmed
// transform + bias, plus its slot's carry (carries [slots, Cout, O], O = K - S) on its first O
// outputs; then the carry becomes the segment's untrimmed outputs T*S .. T*S + O - 1 (bias-free)
// plus the old carry's rest past T*S. Bitwise convtr_step's for each stream alone.
void conv_transpose1d_segments(const ConvTranspose1dShape& s, int64_t nseg, const WindowSegment* segs, const float* x,
                               const float* w, const float* bias, float* y, float* carries);

// 0 when there is no usable device (never throws); `why` gets the runtime's own words when it
// failed to count (an old driver, no driver, a busy device), so that is never read as "0 devices".
int device_count(std::string* why = nullptr);
void set_device(int index);
std::string device_name(int index);  // the runtime's name for it; throws Error(Device)
// True in a MIMI_GPU_EMULATE build: the "device" is the CPU emulator of kernels/gpu/emulator/emulate.h.
bool emulated();
void synchronize();
// "CUDA" or "HIP": the vendor this backend was compiled for.
const char* vendor();

// Streams and graphs, as opaque handles (gpuStream_t, gpuGraphExec_t), so that codec/ needs no
// vendor header. The ops run on the calling thread's current stream: set_stream(s) makes every
// later op of this thread go to s (nullptr: the legacy stream). upload/download stay synchronous
// copies; a plan keeps them out of what it captures.
void* stream_create();
void stream_destroy(void* stream);
void set_stream(void* stream);
// Between capture_begin(s) and capture_end(s) the ops submitted to s are recorded, not run;
// capture_end returns them as an instantiated graph. capture_abort ends a capture that failed
// part-way and drops what it recorded.
void capture_begin(void* stream);
void* capture_end(void* stream);
void capture_abort(void* stream);
void graph_launch(void* graph, void* stream);
void graph_destroy(void* graph);
void stream_synchronize(void* stream);
// Page-locked host memory for a plan's transfers, and copies between it and the device on the
// current stream: asynchronous, and capturable with the step (a replay copies what the host
// buffer holds then).
void* host_alloc(size_t bytes);
void host_free(void* p);
void copy_to_device_async(void* dst, const void* host_src, size_t bytes);
void copy_to_host_async(void* host_dst, const void* src, size_t bytes);
// Events, so that a host waits for one step of a stream while later steps are queued behind it:
// event_record(e, s) marks the work submitted to s so far; event_synchronize(e) waits for it.
void* event_create();
void event_destroy(void* event);
void event_record(void* event, void* stream);
void event_synchronize(void* event);
// Timing events (profiling only: per-stage device times in `mimi bench --verbose`):
// event_record_current marks the calling thread's current stream; event_elapsed_ms waits for
// `end` and gives the device time between the two marks. Destroy with event_destroy.
void* timing_event_create();
void event_record_current(void* event);
float event_elapsed_ms(void* begin, void* end);

}  // namespace mimi::gpu
