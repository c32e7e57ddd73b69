// Encode and decode plans, streaming by construction, with one or more independent stream slots.
//
// Lifecycle: build (for a device, a maximum chunk of `max_frames` 80 ms frames, n_q and a number
// of slots: shapes resolved, every buffer allocated once) -> reset() -> push() (one slot) or
// step() (every slot at once) chunk after chunk -> read outputs.
// A plan carries exactly the state the offline computation needs across a chunk boundary: each
// causal conv's left context, each transposed conv's overlap, each transformer layer's keys and
// values of the last context-1 steps, and the RoPE position. So pushing a signal in chunks of
// any size gives the offline result (up to float summation order), and one plan serves any
// length in constant memory.
//
// bind_input()/bind_codes() + run() is the one-chunk (whole signal) case; stage outputs of the
// last push stay readable so tests can compare layer by layer.
//
// Slots: a plan with B slots holds B independent streams (each its own conv contexts, overlaps,
// key/value windows and RoPE position) and advances any subset of them by one chunk per step().
// The SEANet runs slot by slot (its convolutions carry per-stream context); the transformer and
// the RVQ run once on the active slots' columns side by side ([C, sum of their lengths], slots in
// order), so their GEMMs are as wide as the batch. Nothing mixes across columns there (the
// column-invariant ops of kernels/ops.h), so a stream's codes and samples are bitwise those it
// gets alone in a one-slot plan with the same chunks, whatever the other slots hold.
//
// Pipelined steps (what the batch runner does, codec/batch.cpp): submit() queues a step and
// returns once its inputs are staged; collect() waits for the oldest submitted step and makes its
// results readable. Two steps may be in flight, each with its own staging set (pinned host
// buffers on a GPU), so the host fills step k+1's inputs and hands out step k's results while the
// device computes; on the CPU the work runs inside submit() and collect() only publishes.
//
// Inside a push, the SEANet stages with many values per frame (the encoder's first blocks and
// the decoder's last ones, 64-128 channels at 6-24 kHz) run on sub-chunks of a few frames, so
// their activations stay in cache instead of streaming tens of MB through memory per pass; the
// stream state makes that exact by construction. The low-rate stages and the transformer run on
// the whole push, where wide GEMMs pay.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codec/device.h"
#include "codec/model.h"
#include "codec/profile.h"
#include "codec/step_graph.h"

namespace mimi {

// Memory on the plan's device (host memory for the CPU backends), allocated once when the plan
// is built, plus the logical shape of its current contents (at most the capacity).
class Buffer {
 public:
  Shape shape;  // e.g. [C, T]

  void allocate(const Kernels& k, Shape s);  // zeroed, capacity numel(s); shape = s
  void view(float* p, int64_t capacity, Shape s);  // someone else's memory (not owned)
  float* ptr() { return mem_.get(); }
  const float* ptr() const { return mem_.get(); }
  int64_t size() const { return numel(shape); }
  int64_t capacity() const { return capacity_; }

 private:
  std::shared_ptr<float> mem_;
  int64_t capacity_ = 0;
};

// Stream state. Allocated with the plan; reset() only clears `started`, and the first push of
// a stream initializes the contents (zeros, or replicate padding).
struct ConvState {  // a causal conv's (or resblock's) left context: its last P inputs
  Buffer hist, next;  // [Cin, P]: the current context, and the next one being built
  bool started = false;
  // Where the plan keeps this conv's contexts of every slot in one [slots, Cin, P] buffer (for a
  // conv over all slots at once, codec/layer_steps.h conv_step_segments): slot 0's; hist is a
  // view of this slot's part. nullptr: hist is a buffer of its own.
  float* slots_base = nullptr;
};

struct ConvTrState {  // the overlap of a transposed conv not yet complete
  Buffer carry, old;  // [Cout, K - stride]; `old` holds the previous carry while a new one is built
  bool started = false;
  float* slots_base = nullptr;  // as ConvState's: every slot's carry in one [slots, Cout, O] buffer
};

struct TransformerState {
  std::vector<Buffer> k, v;  // per layer [D, context-1]: keys (after RoPE) and values
  int64_t cached = 0;        // valid columns in k/v
  int64_t pos = 0;           // steps processed (the RoPE offset)
};

// Every slot's key/value windows as rings, on a backend with the windowed fused ops (codec/layer_steps.h uses_rings):
// per layer [slots, D, R], the key of absolute position p in column p mod R, with
// R = context - 1 + the most steps a slot has in one push, so the window's cached keys and a
// step's new ones never share a column and nothing is shifted. `table` is the step's segment
// table in device memory (codec/plan_flight.h stage_segments), one entry per segment of
// transformer_step, in the same order. Then RoPE, the append and attention are two launches per
// layer for every slot, instead of a dozen per slot (TransformerState::k/v are not allocated).
struct TfRings {
  std::vector<Buffer> k, v;
  int64_t R = 0;
  const WindowSegment* table = nullptr;
};
// Which SEANet stages run on sub-chunks, and how long those are.
struct SeanetSplit {
  int64_t sub_frames = 1;  // frames per sub-chunk
  size_t enc_head = 0;     // encoder blocks [0, enc_head) (and conv_in) run per sub-chunk
  size_t dec_tail = 0;     // decoder blocks [dec_tail, end) (and conv_out) run per sub-chunk
};
SeanetSplit seanet_split(const Model& m);

struct Scratch {
  Buffer a, b, c;             // SEANet ping-pong: a, b [maxC * maxT], c half of that
  Buffer work;                // the last inputs of a transposed conv, [Cin, ceil(K/stride)]
  Buffer full;                // their untrimmed output, whose end is the carried tail
  Buffer h, qkv, o, ff;       // transformer: [D,T], [3D,T], [D,T], [FF,T]
  Buffer kbuf, vbuf;          // [D, context-1 + T]: cached then new keys/values
  Buffer qs, ks, os;          // one slot's queries, keys (RoPE applied) and attention output [D, T]
  Buffer stats;               // [2, T]: LayerNorm's column statistics, for a fused layer_norm_linear
};

// A step submitted and not yet collected: its staging set and its slots' columns.
struct StepInFlight {
  int set = 0;
  std::vector<int64_t> offset, frames;
  int64_t total = 0;
};

// The stream state of one encode slot.
struct EncodeStream {
  ConvState conv_in, conv_out, down;
  std::vector<ConvState> res, stride;  // per resblock conv1 and per strided conv
  TransformerState tf;
  void reset();
};

// The stream state of one decode slot.
struct DecodeStream {
  ConvTrState up;
  ConvState conv_in, conv_out;
  std::vector<ConvTrState> convtr;
  std::vector<ConvState> res;
  TransformerState tf;
  void reset();
};

class EncodePlan {
 public:
  // `model`'s tensors must live where `kernels` compute (Engine places them).
  EncodePlan(const Model& model, const Kernels& kernels, int64_t max_frames, int n_q, int slots = 1);

  int64_t max_frames() const { return max_frames_; }
  int n_q() const { return n_q_; }
  int slots() const { return int(streams_.size()); }
  int64_t samples() const { return max_frames_ * frame_size_; }  // one slot's chunk

  void reset();          // forget every slot's stream state: the next push starts new signals
  void reset(int slot);  // a new signal in this slot only
  // Encodes the next `frames` (1..max_frames) frames of slot 0: pcm holds frames * frame_size
  // samples (the other slots are left as they are).
  void push(const float* pcm, int64_t frames);
  // One step of every slot: pcm[s] holds frames[s] * frame_size samples for slot s; frames[s]
  // in 0..max_frames, 0 = the slot sits this step out (its stream is untouched).
  // step() = submit() then collect(); push(), step() and run() need no step in flight.
  void step(const float* const* pcm, const int64_t* frames);
  // Pipelined steps: submit() queues the step (pcm may be reused as soon as it returns; at most
  // two in flight); collect() waits for the oldest one and makes its codes readable.
  void submit(const float* const* pcm, const int64_t* frames);
  void collect();
  int in_flight() const { return int(flight_.size()); }
  // Waits for the steps in flight and drops their results (a runner that stopped on an error);
  // reset() does it too.
  void discard() noexcept;
  // [n_q, F] of the last collected step, F = the frames of all its slots, slot s in columns
  // [slot_offset(s), slot_offset(s) + slot_frames(s)) (row stride F).
  const std::vector<int32_t>& codes() const { return codes_; }
  int64_t slot_offset(int slot) const { return result_offset_.at(size_t(slot)); }
  int64_t slot_frames(int slot) const { return result_frames_.at(size_t(slot)); }

  // Whole signal in slot 0: copies pcm[0:T] (1 <= T <= samples()), zero-pads to whole frames;
  // run() then encodes it from a fresh state in one push of ceil(T / frame_size) frames.
  void bind_input(const float* pcm, int64_t T);
  void run();

  // Of the last push/step (active slots side by side, as codes()), with no step in flight, in host
  // memory (copied from the device when the plan runs on one): "input", "seanet_encoder_out",
  // "encoder_transformer_out", "latent", "rvq_first_in", "rvq_rest_in"
  const Buffer& stage(const std::string& name) const;
  void set_profile(Profile* p) { profile_ = p; }
  // Captured steps on a backend with graphs (codec/step_graph.h): on by default; a profiled
  // step always runs op by op, so the stage table times the ops.
  void set_graphs(bool on) { graphs_.set_enabled(on); }
  void set_graph_stats(GraphStats* sink) { graphs_.set_stats(sink); }
  const GraphStats& graph_stats() const { return graphs_.stats(); }

 private:
  void set_frames(const int64_t* frames);  // offsets, the total, checks
  void encode(int set);                    // input_stage_[set] holds the active slots' samples
  void encode_work();                      // encode()'s device work (captured, codec/step_graph.h)
  void seanet(int slot);                   // its input -> its columns of seanet_out_ and tf_out_
  // Every active slot's SEANet at once (its frames all equal, one sub-chunk): the same results
  // as seanet() slot by slot, in a few launches per layer (a backend with conv1d_segments).
  void seanet_segments();
  bool segments_together() const;  // this step can take seanet_segments()
  // encoder block b on sc.a [C, T] in place (T and C updated)
  void block(EncodeStream& st, size_t b, Scratch& sc, int64_t& C, int64_t& T);

  const Model& m_;
  const Kernels& k_;
  int64_t max_frames_, frame_size_;
  int n_q_;
  int64_t bound_frames_ = 0;
  std::vector<int64_t> offset_, frames_;  // per slot, of the last step submitted
  int64_t total_ = 0;                     // frames of the last step submitted
  std::deque<StepInFlight> flight_;             // submitted, not collected; oldest first
  std::vector<int64_t> result_offset_, result_frames_;  // per slot, of the last step collected
  Buffer input_, seanet_out_, tf_out_, latent_, first_in_, rest_in_;  // all slots side by side
  Buffer rvq_work_;  // rvq_encode's scratch (kernels/ops.h rvq_work_floats)
  std::shared_ptr<int32_t> codes_dev_;  // [n_q, slots * max_frames] on the device
  std::vector<int32_t> codes_;          // the last collected step's codes in host memory
  SeanetSplit split_;
  Scratch s_;     // whole-push stages
  Scratch head_;  // the sub-chunked SEANet head
  // Steps whose slots all push the same frames, at most one sub-chunk, run the SEANet and the
  // downsampling on every slot at once (a streaming plan on a GPU): then the scratch holds every
  // slot's columns and each conv's contexts of all slots are one buffer.
  bool together_ = false;
  std::vector<Buffer> slot_contexts_;
  std::vector<EncodeStream> streams_;
  std::shared_ptr<int32_t> positions_dev_;  // [slots] each slot's RoPE position, then the step's segment table
  std::vector<TransformerState*> tf_;        // [slots]: &streams_[s].tf
  TfRings rings_;  // every slot's key/value windows, where the backend has the windowed ops (R > 0)
  // a step's transfers (codec/step_graph.h Staged), per staging set: samples in, positions in,
  // codes out
  Staged<float> input_stage_[2];
  Staged<int32_t> positions_stage_[2], codes_stage_[2];
  Profile* profile_ = nullptr;
  mutable std::map<std::string, Buffer> host_copies_;  // stage() of a device plan
  StepGraphs graphs_;  // last: its graphs go before the buffers they use
};

class DecodePlan {
 public:
  DecodePlan(const Model& model, const Kernels& kernels, int64_t max_frames, int n_q, int slots = 1);

  int64_t max_frames() const { return max_frames_; }
  int n_q() const { return n_q_; }
  int slots() const { return int(streams_.size()); }

  void reset();
  void reset(int slot);
  // Decodes the next `frames` frames of slot 0: codes [n_q, frames] (row stride `frames`), every
  // value in [0, bins) (checked, throws Error(Input)). Output: frames * frame_size samples.
  void push(const int32_t* codes, int64_t frames);
  // One step of every slot: codes[s] [n_q, frames[s]] (row stride frames[s]); frames[s] in
  // 0..max_frames, 0 = the slot sits this step out.
  // step() = submit() then collect(); push(), step() and run() need no step in flight.
  void step(const int32_t* const* codes, const int64_t* frames);
  // Pipelined steps, as EncodePlan's: the codes are checked and staged by submit().
  void submit(const int32_t* const* codes, const int64_t* frames);
  void collect();
  int in_flight() const { return int(flight_.size()); }
  void discard() noexcept;
  // [1, F * frame_size] of the last collected step, in host memory (copied from the device, or
  // out of the plan's buffer on the CPU), valid until the next submit(); slot s at samples
  // [slot_offset(s), slot_offset(s) + slot_frames(s)) * frame_size.
  const Buffer& output() const { return output_view_; }
  int64_t slot_offset(int slot) const { return result_offset_.at(size_t(slot)); }
  int64_t slot_frames(int slot) const { return result_frames_.at(size_t(slot)); }

  // Whole signal in slot 0: codes [n_q, max_frames]; run() decodes them from a fresh state.
  void bind_codes(const int32_t* codes);
  void run();

  // Of the last push/step, with no step in flight, in host memory: "quantized_latent", "upsampled_latent",
  // "decoder_transformer_out", "output"
  const Buffer& stage(const std::string& name) const;
  void set_profile(Profile* p) { profile_ = p; }
  // Captured steps on a backend with graphs (codec/step_graph.h): on by default; a profiled
  // step always runs op by op, so the stage table times the ops.
  void set_graphs(bool on) { graphs_.set_enabled(on); }
  void set_graph_stats(GraphStats* sink) { graphs_.set_stats(sink); }
  const GraphStats& graph_stats() const { return graphs_.stats(); }

 private:
  void decode_work();     // a step's device work (captured, codec/step_graph.h)
  void seanet(int slot);  // its columns of tf_out_ -> its samples of output_
  // Every active slot's SEANet at once (frames all equal, one sub-chunk), as EncodePlan's.
  void seanet_segments();
  bool segments_together() const;
  // decoder block b on sc.a [C, T] in place (T and C updated)
  void block(DecodeStream& st, size_t b, Scratch& sc, int64_t& C, int64_t& T);

  const Model& m_;
  const Kernels& k_;
  int64_t max_frames_, frame_size_;
  int n_q_;
  std::vector<int64_t> offset_, frames_;  // per slot, of the last step submitted
  int64_t total_ = 0;
  std::deque<StepInFlight> flight_;             // submitted, not collected; oldest first
  std::vector<int64_t> result_offset_, result_frames_;  // per slot, of the last step collected
  std::vector<int32_t> codes_;          // bind_codes(): [n_q, max_frames]
  std::shared_ptr<int32_t> codes_dev_;  // [n_q, total] of a step on the device
  Buffer sum_, quantized_, tmp_, upsampled_, tf_out_, output_;  // all slots side by side
  SeanetSplit split_;
  Scratch s_;     // whole-push stages
  Scratch tail_;  // the sub-chunked SEANet tail
  bool together_ = false;  // as EncodePlan's: the upsampling and SEANet on every slot at once
  std::vector<Buffer> slot_contexts_;
  std::vector<DecodeStream> streams_;
  std::shared_ptr<int32_t> positions_dev_;  // [slots] each slot's RoPE position, then the step's segment table
  std::vector<TransformerState*> tf_;        // [slots]: &streams_[s].tf
  TfRings rings_;  // every slot's key/value windows, where the backend has the windowed ops (R > 0)
  // a step's transfers (codec/step_graph.h Staged), per staging set: codes and positions in,
  // samples out (host memory of their own: a collected step's samples outlive the next submit)
  Staged<int32_t> codes_stage_[2], positions_stage_[2];
  Staged<float> output_stage_[2];
  Buffer output_view_;  // output(): a view of the collected step's output_stage_ host memory
  Profile* profile_ = nullptr;
  mutable std::map<std::string, Buffer> host_copies_;  // stage() of a device plan
  StepGraphs graphs_;  // last: its graphs go before the buffers they use
};

}  // namespace mimi
