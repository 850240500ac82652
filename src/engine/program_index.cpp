// SPDX-License-Identifier: MIT
#include "engine/program_index.hpp"

#include <algorithm>
#include <array>
#include <unordered_map>

#include "graph/queues.hpp"

namespace moesim {

ProgramIndex::ProgramIndex(const Program& p) {
  std::unordered_map<std::string, int32_t> folded_id;
  std::vector<int32_t> of_name(p.names.size(), -1);
  for (const Op& op : p.ops) {
    int32_t& id = of_name[op.name];
    if (id < 0) {
      auto [it, inserted] = folded_id.try_emplace(folded_name(p.names[op.name]), static_cast<int32_t>(folded_names.size()));
      if (inserted) folded_names.push_back(it->first);
      id = it->second;
    }
    folded.push_back(id);
  }
  const size_t n = p.ops.size();
  std::vector<std::vector<uint32_t>> out(n);
  num_preds.assign(n, 0);
  match.assign(n, -1);
  queue_pred.assign(n, -1);
  std::array<int64_t, kNumQueues> last{};
  last.fill(-1);
  std::array<int32_t, kNumGroupKinds> collectives{};
  for (size_t i = 0; i < n; ++i) {
    const Op& op = p.ops[i];
    const int q = queue_of(op);
    if (last[static_cast<size_t>(q)] >= 0) {
      out[static_cast<size_t>(last[static_cast<size_t>(q)])].push_back(static_cast<uint32_t>(i));
      ++num_preds[i];
      queue_pred[i] = static_cast<int32_t>(last[static_cast<size_t>(q)]);
    }
    last[static_cast<size_t>(q)] = static_cast<int64_t>(i);
    for (uint32_t d : p.deps_of(op)) {
      out[d].push_back(static_cast<uint32_t>(i));
      ++num_preds[i];
    }
    if (is_collective(op.kind)) match[i] = collectives[static_cast<size_t>(op.group)]++;
  }
  succ_begin.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) succ_begin[i + 1] = succ_begin[i] + static_cast<uint32_t>(out[i].size());
  succ.reserve(succ_begin[n]);
  for (const auto& v : out) succ.insert(succ.end(), v.begin(), v.end());
}

std::string folded_name(const std::string& name) {
  const size_t dot = name.find('.');
  return name.starts_with("layer") && dot != std::string::npos ? "layer*" + name.substr(dot) : name;
}

std::vector<std::pair<std::string, Picoseconds>> ranked(const ProgramIndex& ix, const std::vector<Picoseconds>& by_folded,
                                                        size_t keep) {
  std::vector<std::pair<std::string, Picoseconds>> out;
  for (size_t i = 0; i < by_folded.size(); ++i) {
    if (by_folded[i] > 0) out.emplace_back(ix.folded_names[i], by_folded[i]);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (out.size() > keep) out.resize(keep);
  return out;
}


}  // namespace moesim
