// The prepared-weights cache (issue 29): a model's tensors written once, in exactly the form the
// kernels read (float32, HF q/k rows in moshi order, codebooks divided by their usage, the
// codebooks' squared norms), and mapped read-only by later runs, so that a process starts without
// a pass over the weights file and every process on the machine shares one copy of the pages.
//
// The kernels pack their operands per call, so the form holds nothing that depends on the CPU:
// one cache file serves every ISA.
//
// A cache file (FORMAT.md, "Prepared weights"):
//   "MIMIPW01" | u64 header bytes H | 32 bytes sha256 of the header | header JSON (H bytes) |
//   zeros to a 4096-byte boundary | tensors, each 64-byte aligned
// The header records the format version, the source file's identity (device, inode, size,
// mtime and ctime in ns) and path, its fingerprint, dialect, the canonical config, and each
// tensor's name, offset and shape. A file whose magic, header digest, version, source identity,
// config, tensor table or size disagree is not used (a miss: rebuilt); one is never written in
// place (a temporary, renamed), so a mapping never changes under the run that uses it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "codec/model.h"

namespace mimi {

using TensorMap = std::map<std::string, Tensor>;  // by moshi name

// embedding_sum / cluster_usage in place for every codebook, and "<book>.sq_norm" added (empty
// tensors when !with_sq_norms: only the encoder's search reads them); cluster_usage emptied.
// Throws Error(Weights) naming `what` when a division overflows.
void normalize_codebooks(TensorMap& t, const Config& cfg, const std::string& what, bool with_sq_norms);
// The model's layers from normalized tensors (m.cfg set).
void assemble_model(Model& m, const TensorMap& t);

// The identity of a weights file as stat gives it; nullopt for what is not a regular file (a pipe
// or device: never cached).
struct SourceIdentity {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
  static std::optional<SourceIdentity> of(const std::string& path);
  // Whether this identity, taken at `now_ns` (CLOCK_REALTIME), tells every later change of the
  // file: not when the file changed less than one tick of its timestamps before (another change
  // in that tick, same size and inode, would leave the same identity: a file system of whole
  // seconds, ext2 or FAT, replaced within the second). Ticks: 2 s where both times have no
  // nanoseconds (whole-second timestamps), else 100 ms (the kernel stamps files from a clock
  // that moves in ticks of up to 10 ms). An unsettled file is read, not cached, that run.
  bool settled(int64_t now_ns) const;
  bool operator==(const SourceIdentity& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns && ctime_ns == o.ctime_ns;
  }
};

// The cache file for this source and config in `dir` (its name: a digest of both and the
// format version).
std::string prepared_path(const std::string& dir, const SourceIdentity& id, const Config& cfg);

// The model mapped from cache file `path`, or nullptr with `why` (a miss: missing, stale,
// damaged). Throws only for the environment (EMFILE, ENOMEM, EIO: Error(Environment)).
std::shared_ptr<const Model> map_prepared(const std::string& path, const SourceIdentity& id, const Config& cfg,
                                          const std::string& source, std::string* why);

// Writes `t` (normalize_codebooks' output, every tensor kept) as the cache file `path`: a
// temporary beside it, read-only, synced, renamed over it. Then removes the oldest entries of its
// folder past `keep` and temporaries of processes that are gone. Throws Error on failure (the
// caller warns: a cache that cannot be written is never the run's failure).
void write_prepared(const std::string& path, const SourceIdentity& id, const Model& m, const TensorMap& t,
                    const std::string& source, int keep = 4);

}  // namespace mimi
