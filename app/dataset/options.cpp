// `mimi dataset encode`: the settings that need no model, checked before one is loaded (a typo in
// --max-errors must not cost a weights load, nor leave a dataset.json behind).
#include <cmath>

#include "app/dataset/dataset.h"
#include "codec/error.h"

namespace mimi::app::dataset {

double max_errors_limit(const std::string& s, size_t items) {
  if (s.empty()) return -1;
  const bool pct = s.back() == '%';
  const std::string num = pct ? s.substr(0, s.size() - 1) : s;
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(num, &used);
  } catch (...) {
  }
  if (num.empty() || used != num.size() || !(v >= 0) || !std::isfinite(v) || (!pct && v != std::floor(v)) ||
      (pct && v > 100))
    throw Error(ErrorKind::Usage, "--max-errors must be a count or a percentage (10, 2%), got '" + s + "'");
  return pct ? v / 100.0 * double(items) : v;
}

void check_encode_options(const EncodeShardOptions& o) {
  if (o.plan.empty() || o.out.empty() || o.shard.empty()) throw Error(ErrorKind::Usage, "--plan, --shard and -o are required");
  max_errors_limit(o.max_errors, 0);
  if (o.sync_items < 1) throw Error(ErrorKind::Usage, "--sync-items must be at least 1");
  if (!std::isfinite(o.sync_seconds) || o.sync_seconds < 0)
    throw Error(ErrorKind::Usage, "--sync-seconds must be a number of seconds >= 0");
  if (o.batch < 1) throw Error(ErrorKind::Usage, "--batch must be at least 1");
  if (o.readers < 0) throw Error(ErrorKind::Usage, "--readers must be at least 0");
  if (o.n_q < 1) throw Error(ErrorKind::Usage, "--n-q must be at least 1");
}

}  // namespace mimi::app::dataset
