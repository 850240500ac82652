// SPDX-License-Identifier: MIT
// Where ops of different ranks meet before a transfer can start: a collective when every member
// of its group instance has reached it (the k-th collective of a group kind on each member), a
// send when its receive is posted and vice versa (the n-th message of a channel from a sender to
// a receiver pairs the n-th send with the n-th receive). Members are (slot, op) pairs.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <tuple>
#include <utility>
#include <vector>

#include "plan/parallel_plan.hpp"

namespace moesim {

class Rendezvous {
  // Keys are looked up once per collective or message, never iterated: hashed.
  struct KeyHash {
    template <typename... T>
    size_t operator()(const std::tuple<T...>& k) const {
      uint64_t h = 0;
      std::apply([&](const auto&... v) { ((h = h * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(v)), ...); }, k);
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };

 public:
  using Member = std::pair<int32_t, uint32_t>;  // (slot, op)

  void clear() {
    collectives_.clear();
    messages_.clear();
    posted_.clear();
  }

  // `m` reaches the `match`-th collective of kind `kind` of the group instance `group`, which
  // `need` members take part in. When it is the last to arrive, `out` receives every member (the
  // instance is then forgotten) and the call returns true.
  bool arrive(GroupKind kind, int64_t group, int32_t match, int64_t need, Member m, std::vector<Member>& out) {
    const std::tuple<int, int64_t, int32_t> key{static_cast<int>(kind), group, match};
    std::vector<Member>& arrived = collectives_[key];
    arrived.push_back(m);
    if (static_cast<int64_t>(arrived.size()) < need) return false;
    out = std::move(arrived);
    collectives_.erase(key);
    return true;
  }

  // `m` posts a send (or a receive) of `channel` from `sender` to `receiver`. When its peer op
  // is already posted, `out` receives both and the call returns true.
  bool post(int channel, int64_t sender, int64_t receiver, bool is_send, Member m, std::vector<Member>& out) {
    const int64_t nth = posted_[{channel * 2 + (is_send ? 1 : 0), sender, receiver}]++;
    const std::tuple<int, int64_t, int64_t, int64_t> key{channel, sender, receiver, nth};
    std::vector<Member>& waiting = messages_[key];
    waiting.push_back(m);
    if (waiting.size() < 2) return false;
    out = std::move(waiting);
    messages_.erase(key);
    return true;
  }

 private:
  std::unordered_map<std::tuple<int, int64_t, int32_t>, std::vector<Member>, KeyHash> collectives_;
  std::unordered_map<std::tuple<int, int64_t, int64_t, int64_t>, std::vector<Member>, KeyHash> messages_;
  std::unordered_map<std::tuple<int, int64_t, int64_t>, int64_t, KeyHash> posted_;  // per (channel x direction, sender, receiver)
};

}  // namespace moesim
