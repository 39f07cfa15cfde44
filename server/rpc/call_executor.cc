#include "server/rpc/call_executor.h"

#include <algorithm>
#include <utility>

namespace posbias::rpc {

CallExecutor::CallExecutor(Options options)
    : options_(options),
      threads_per_tenant_(static_cast<int>(limits::TenantShare(options.threads, options.tenant_share))) {
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { Loop(); });
}

CallExecutor::~CallExecutor() { Stop(); }

bool CallExecutor::TrySubmit(const std::string& tenant, std::function<void()> work) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || waiting_ >= options_.max_queued) return false;
    tenants_[tenant].waiting.push_back(std::move(work));
    ++waiting_;
  }
  wake_.notify_one();
  return true;
}

void CallExecutor::Stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

bool CallExecutor::TakeNext(std::function<void()>* work, std::string* tenant) {
  if (tenants_.empty()) return false;
  // Round robin: the tenants after the last one served, then from the start up to it. First
  // among the tenants below their share; when none of them waits, among all (work-conserving: a
  // share binds only while another tenant waits, so a tenant alone has every thread).
  for (const bool within_share : {true, false}) {
    auto start = tenants_.upper_bound(turn_);
    for (size_t seen = 0; seen < tenants_.size(); ++seen, ++start) {
      if (start == tenants_.end()) start = tenants_.begin();
      Tenant& candidate = start->second;
      if (candidate.waiting.empty() || (within_share && candidate.running >= threads_per_tenant_)) continue;
      *work = std::move(candidate.waiting.front());
      candidate.waiting.pop_front();
      ++candidate.running;
      --waiting_;
      *tenant = turn_ = start->first;
      return true;
    }
  }
  return false;
}

void CallExecutor::Loop() {
  while (true) {
    std::function<void()> work;
    std::string tenant;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return TakeNext(&work, &tenant) || (stopping_ && waiting_ == 0); });
      if (!work) return;  // Stopping, and nothing left to run.
    }
    work();
    {
      std::lock_guard lock(mutex_);
      auto it = tenants_.find(tenant);
      if (--it->second.running == 0 && it->second.waiting.empty()) tenants_.erase(it);
    }
    wake_.notify_all();  // A thread of this tenant's share is free: waiting work of it may start.
  }
}

}  // namespace posbias::rpc
