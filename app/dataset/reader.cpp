#include "app/dataset/reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

#include "app/dataset/dataset.h"
#include "app/dataset/shard_writer.h"
#include "app/sys/file_io.h"
#include "codec/error.h"

namespace mimi::app::dataset {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The items of an unfinished shard a resume would keep: its journal's records that its tar bears out.
void unfinished_shard(const ShardPaths& p, const json& dataset, ReadableShard& r) {
  const JournalRead jr = read_journal_text(read_file_or_empty(p.journal), journal_header(r.shard, dataset), p.journal);
  if (jr.entries.empty()) return;
  std::error_code ec;
  r.tar = fs::exists(p.partial, ec) ? p.partial : p.tar;  // (sealed, renamed, .done not yet written)
  if (!fs::exists(r.tar, ec)) return;  // a resume encodes the journaled items again: none to read yet
  const int fd = open_input(r.tar);
  size_t agree = 0;
  try {
    agree = records_the_tar_bears_out(jr.entries, fd, r.tar);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  for (size_t i = 0; i < agree; ++i) {
    r.bytes = jr.entries[i].end;
    r.items += jr.entries[i].ok;
  }
}

}  // namespace

ReadableOutput readable_shards(const std::string& out, bool unfinished) {
  ReadableOutput o;
  std::error_code ec;
  if (!fs::exists(fs::path(out) / "dataset.json", ec) && !output_holds_records(out))
    throw Error(ErrorKind::Input, out + ": not a `mimi dataset encode` output, or one with no item recorded yet (no dataset.json)");
  o.dataset = read_dataset_json(out);
  if (!o.dataset.is_object() || !o.dataset.contains("shards") || !o.dataset["shards"].is_number_integer() ||
      o.dataset["shards"].get<int64_t>() < 1 || o.dataset["shards"].get<int64_t>() > 1000000)
    throw Error(ErrorKind::Input, (fs::path(out) / "dataset.json").string() + ": damaged: no shard count");
  const int n = o.dataset["shards"].get<int>();
  for (int i = 0; i < n; ++i) {
    const ShardPaths p(out, i);
    ReadableShard r;
    r.shard = i;
    std::string why;
    const json done = read_done(p, &why, &o.dataset, nullptr);
    if (!why.empty()) o.stale.push_back(why);
    if (done.is_object()) {
      r.tar = p.tar;
      r.bytes = done.value("tar_bytes", uint64_t(0));
      r.sha256 = done.value("tar_sha256", "");
      r.items = done.value("ok", int64_t(0));
    } else if (unfinished) {
      unfinished_shard(p, o.dataset, r);
    }
    if (r.items > 0) o.shards.push_back(std::move(r));
  }
  return o;
}

}  // namespace mimi::app::dataset
