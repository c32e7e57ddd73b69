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
  int source = -1;   // plan time only: the manifest (index into read_manifests' list) and its line
  size_t line = 0;   // (0: a directory's file) it came from, for messages
};

struct Manifest {
  std::string path, kind;  // kind: jsonl, wav.scp, segments, list, directory
  std::string sha256;      // of the file; of the sorted listing for a directory
  size_t items = 0;
};

// The bad entries of a set of manifests (a malformed line, a FIFO, a segment outside its file,
// duplicate ids), collected so that one run reports every one of them instead of the first.
class Problems {
 public:
  static constexpr size_t kPrinted = 100;  // warnings printed; the rest are counted
  // `msg`: "WHERE: WHAT" with paths as their bytes (the terminal formatter of app/main.cpp makes
  // a message printable). `skippable`: the entry can be left out
  // of a plan made with skip_bad (a duplicate id cannot: which one would be meant?).
  void add(const std::string& msg, bool skippable = true);
  bool empty() const { return list_.empty(); }
  size_t size() const { return list_.size(); }
  bool all_skippable() const { return fatal_ == 0; }
  const std::vector<std::string>& list() const { return list_; }
  // Each as a warning (the first kPrinted, then how many more).
  void warn_all() const;
  // Error(Input) with the count: `print`: after warn_all, naming the first; else naming the first
  // ten in the message itself (a caller of read_manifests without a collector).
  [[noreturn]] void fail(bool print = true) const;

 private:
  std::vector<std::string> list_;
  size_t fatal_ = 0;
};

// Reads every manifest; a `segments` file goes with the `wav.scp` of the same folder among
// `paths`. Relative audio paths resolve against manifest_base (entries.h). Every malformed line
// (file:line), unusable id and duplicate id or key goes to `problems`; without a collector they
// are thrown at the end as one Error(Input) that lists them. Entries are not looked at here
// (inspect_items does, many at a time) except in a directory walk.
std::vector<Item> read_manifests(const std::vector<std::string>& paths, std::vector<Manifest>& manifests,
                                 Problems* problems = nullptr);

// A segment may end this far after the end of its file (Kaldi's extract-segments
// --max-overshoot): it is planned to the end of the file. Further, or starting at or after the
// end, it is a bad entry.
constexpr double kMaxOvershootSeconds = 0.5;

struct Inspection {
  size_t unreadable = 0;  // items planned although their file cannot be read now
  size_t clipped = 0;     // segments planned to the end of their file (an overshoot <= kMaxOvershootSeconds)
};
// Looks at every item's file, `threads` files at a time: check_entry (entries.h) decides what it
// is; a refused entry goes to `problems` and out of `items`. A file that cannot be read now keeps
// duration 0 (when unknown) and gets probe_error (its shard records the error unless it is
// readable by then). The header of a file is read when one of its items needs its length (no
// duration, or a segment) or names a channel, and then everything it tells is checked, the same
// way for every kind of manifest: the channel against the file's channels, start and end against
// its length (kMaxOvershootSeconds), a duration the manifest gives against what the file holds;
// each item that fails goes to `problems` with every reason. Unknown durations come from the
// headers. Throws Error(Environment) when the machine fails.
Inspection inspect_items(std::vector<Item>& items, const std::vector<Manifest>& manifests, int threads,
                         Problems& problems);

// The key for an id: a tar- and WebDataset-safe stem (no '.', which WebDataset splits on): the id
// itself when every byte is in [A-Za-z0-9_-/+=,@] (and no '/' leads, doubles or ends it), else the
// id with those bytes as '_' plus "_" and 8 hex digits of the sha256 of the exact id bytes, so
// that ids differing only in replaced bytes (two CJK names of one length) keep distinct keys.
std::string key_for(const std::string& id);

// "MANIFEST:LINE" (or the directory) an item came from.
std::string origin_of(const Item& it, const std::vector<Manifest>& manifests);

// "mix" or the channel index.
std::string channel_name(int channel);

}  // namespace mimi::app::dataset
