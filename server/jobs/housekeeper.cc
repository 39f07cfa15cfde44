#include "server/jobs/housekeeper.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace posbias::jobs {

Housekeeper::Housekeeper(JobStore* store, Options options, Clock clock)
    : store_(store), options_(std::move(options)), clock_(std::move(clock)) {}

Housekeeper::~Housekeeper() { Stop(); }

Housekeeper::RoundResult Housekeeper::Round() {
  RoundResult result;
  if (store_->lease_ms() > 0) {
    if (auto reaped = store_->ReapExpiredLeases(); reaped.ok()) result.reaped = *reaped;
    if (result.reaped > 0 && options_.on_reaped) options_.on_reaped(result.reaped);
  }
  const int64_t now = clock_();
  if (now >= next_purge_ms_) {
    next_purge_ms_ = now + options_.purge_interval_ms;
    const auto retention_ms = static_cast<int64_t>(options_.retention_hours * 3.6e6);
    if (auto purged = store_->PurgeFinishedBefore(now - retention_ms); purged.ok()) result.purged = *purged;
  }
  return result;
}

void Housekeeper::Start() {
  const int64_t tick_ms = store_->lease_ms() > 0 ? std::max<int64_t>(1, store_->lease_ms() / 2) : options_.purge_interval_ms;
  task_.Start({std::chrono::milliseconds(tick_ms)}, [this] { Round(); });
}

void Housekeeper::Stop() { task_.Stop(); }

}  // namespace posbias::jobs
