// The items of a dataset, from its manifests: JSON Lines, Kaldi wav.scp (+ segments), plain lists
// of paths, or directories of audio files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mimi::app::dataset {

struct Item {
  std::string id;    // from the manifest, else derived from the path (and segment)
  std::string key;   // the tar member stem: id with characters outside [A-Za-z0-9_-/+=,@] as '_'
  std::string path;  // absolute
  double start = 0;  // seconds into the file
  double end = -1;   // seconds; -1 = the end of the file
  double duration = -1;  // seconds of the item; -1 = unknown (read from the header by probe_durations)
  int channel = -1;  // -1 = the channels averaged ("mix")
  std::string probe_error;  // why the header could not be read at plan time ("" = fine)
};

struct Manifest {
  std::string path, kind;  // kind: jsonl, wav.scp, segments, list, directory
  std::string sha256;      // of the file; of the sorted listing for a directory
  size_t items = 0;
};

// Reads every manifest; a `segments` file goes with the `wav.scp` of the same folder among
// `paths`. Relative audio paths resolve against the manifest's folder. Throws Error(Input) for a
// malformed line (file:line), Error(Usage) for duplicate ids or keys (naming them).
std::vector<Item> read_manifests(const std::vector<std::string>& paths, std::vector<Manifest>& manifests);

// Fills unknown durations from the file headers, `threads` files at a time. A file whose header
// cannot be read keeps duration 0 and gets probe_error (its encode records the error). Returns the
// count of such files.
size_t probe_durations(std::vector<Item>& items, int threads);

// The key for an id: a tar- and WebDataset-safe stem (no '.', which WebDataset splits on).
std::string key_for(const std::string& id);

// "mix" or the channel index.
std::string channel_name(int channel);

}  // namespace mimi::app::dataset
