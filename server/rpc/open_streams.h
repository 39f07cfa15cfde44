// The open streams of one kind (watches, uploads), owned here from their start until their
// reactor's OnDone: a stream's reactor is shared, so a thread that took a snapshot (a poller, a
// watchdog) may still use it while OnDone removes it; the last owner frees it, outside the lock.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace posbias::rpc {

template <typename Stream>
class OpenStreams {
 public:
  // Adds `stream`; returns how many were open before.
  size_t Add(std::shared_ptr<Stream> stream) {
    std::lock_guard lock(mutex_);
    const size_t before = open_.size();
    open_[stream.get()] = std::move(stream);
    return before;
  }
  // From the stream's OnDone.
  void Remove(Stream* stream) {
    std::shared_ptr<Stream> last;  // Released after the lock.
    std::lock_guard lock(mutex_);
    if (auto it = open_.find(stream); it != open_.end()) {
      last = std::move(it->second);
      open_.erase(it);
    }
  }
  std::vector<std::shared_ptr<Stream>> Snapshot() {
    std::lock_guard lock(mutex_);
    std::vector<std::shared_ptr<Stream>> streams;
    for (const auto& [raw, stream] : open_) streams.push_back(stream);
    return streams;
  }
  size_t size() {
    std::lock_guard lock(mutex_);
    return open_.size();
  }

 private:
  std::mutex mutex_;
  std::map<Stream*, std::shared_ptr<Stream>> open_;
};

}  // namespace posbias::rpc
