// The settings of `mimi dataset plan|encode|status|verify` that need nothing else to be judged,
// checked in one place before any work: a typo in --max-errors must not cost a weights load, nor
// leave a dataset.json behind; an empty value (an unset shell variable: --plan "$PLAN") is a
// usage error, never taken for "not given" and so for a silent default.
#include <cmath>
#include <cstdlib>

#include "app/dataset/dataset.h"
#include "codec/error.h"

namespace mimi::app::dataset {

namespace {

bool digits(const std::string& s, size_t b, size_t e) {
  if (b >= e) return false;
  for (size_t i = b; i < e; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

void non_empty(const std::string& value, const char* what) {
  if (value.empty()) throw Error(ErrorKind::Usage, std::string(what) + " is empty (an unset shell variable?)");
}

}  // namespace

double max_errors_limit(const std::optional<std::string>& text, size_t items) {
  if (!text) return -1;
  const std::string& s = *text;
  // Digits only (and one '.' in a percentage), spelled out rather than left to strtod, which also
  // takes leading blanks, signs, exponents, hex, "inf" and "nan".
  const bool pct = !s.empty() && s.back() == '%';
  const size_t end = pct ? s.size() - 1 : s.size(), dot = pct ? s.find('.') : std::string::npos;
  const bool ok = dot == std::string::npos ? digits(s, 0, end) : dot < end && digits(s, 0, dot) && digits(s, dot + 1, end);
  const double v = ok ? std::strtod(s.substr(0, end).c_str(), nullptr) : -1;  // (400 digits: inf, refused)
  if (!ok || !std::isfinite(v) || (pct && v > 100))
    throw Error(ErrorKind::Usage, "--max-errors must be a count or a percentage of at most 100% (10, 2%, 2.5%), got '" +
                                      s + "'");
  return pct ? v / 100.0 * double(items) : v;
}

void check_encode_options(const EncodeShardOptions& o) {
  non_empty(o.plan, "--plan");
  non_empty(o.shard, "--shard");
  non_empty(o.out, "-o");
  max_errors_limit(o.max_errors, 0);
  if (o.sync_items < 1) throw Error(ErrorKind::Usage, "--sync-items must be at least 1");
  if (!std::isfinite(o.sync_seconds) || o.sync_seconds < 0)
    throw Error(ErrorKind::Usage, "--sync-seconds must be a number of seconds >= 0");
  if (o.batch < 1) throw Error(ErrorKind::Usage, "--batch must be at least 1");
  if (o.readers < 0) throw Error(ErrorKind::Usage, "--readers must be at least 0");
  if (o.n_q < 1) throw Error(ErrorKind::Usage, "--n-q must be at least 1");
}

void check_plan_options(const PlanOptions& o) {
  non_empty(o.out, "-o");
  if (o.manifests.empty()) throw Error(ErrorKind::Usage, "no manifest given");
  for (const std::string& m : o.manifests) non_empty(m, "a manifest path");
  if (o.shards < 0 || o.shards > 99999) throw Error(ErrorKind::Usage, "--shards must be 1..99999");
  if (!std::isfinite(o.shard_hours) || o.shard_hours < 0)
    throw Error(ErrorKind::Usage, "--shard-hours must be a positive number of hours");
  if ((o.shards > 0) == (o.shard_hours > 0)) throw Error(ErrorKind::Usage, "give one of --shards N and --shard-hours H");
  if (o.probe_threads < 0) throw Error(ErrorKind::Usage, "--probe-threads must be at least 1 (or 0: 4 per CPU)");
}

void check_status_options(const StatusOptions& o) {
  non_empty(o.out, "the output directory");
  if (o.plan) non_empty(*o.plan, "--plan");
  if (o.format != "table" && o.format != "json" && o.format != "ranges")
    throw Error(ErrorKind::Usage, "--format must be table, json or ranges");
}

void check_verify_options(const VerifyOptions& o) {
  non_empty(o.out, "the output directory");
  if (o.plan) non_empty(*o.plan, "--plan");
}

}  // namespace mimi::app::dataset
