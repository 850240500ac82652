// SPDX-License-Identifier: MIT
// The slab allocator against hand-worked placements (best fit, coalescing, growth at the top,
// which releases a block's memory comes from), the ordering clocks, and plan_slab: the waits it
// adds are exactly the cross-queue reuses the program does not order already, and on random
// programs and timelines no two buffers live at one time ever share memory. On random requests the
// allocator's search structure places exactly as a plain scan of every block.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <random>

#include "memory/buffer_plan.hpp"
#include "memory/placement_frontier.hpp"
#include "memory/slab_allocator.hpp"

using namespace moesim;

namespace {
constexpr uint64_t K = kSlabAlignment;
}

TEST_CASE("block sizes: rounded up to the granule, never zero") {
  CHECK(slab_block_bytes(0) == K);
  CHECK(slab_block_bytes(1) == K);
  CHECK(slab_block_bytes(K) == K);
  CHECK(slab_block_bytes(K + 1) == 2 * K);
}

TEST_CASE("best fit, coalescing, growth at the top") {
  // Ops are numbered in program order; every release here comes from an op before the placing one.
  SlabAllocator s;
  const auto a = s.place(4 * K, 0);  // [0, 4K)
  const auto b = s.place(2 * K, 1);  // [4K, 6K)
  const auto c = s.place(3 * K, 2);  // [6K, 9K)
  const auto d = s.place(1 * K, 3);  // [9K, 10K)
  CHECK(a.offset == 0);
  CHECK(b.offset == 4 * K);
  CHECK(c.offset == 6 * K);
  CHECK(d.offset == 9 * K);
  CHECK(s.high_water() == 10 * K);
  s.release(a.block, 4, kComputeQueue, 5);
  s.release(c.block, 5, kComputeQueue, 6);
  // Holes of 4K at 0 and 3K at 6K: a 3K request takes the smaller hole exactly.
  const auto e = s.place(3 * K, 6);
  CHECK(e.offset == 6 * K);
  // A 2K request goes into the 4K hole (the only one left), its rest stays free.
  const auto f = s.place(2 * K, 7);
  const auto g = s.place(2 * K, 8);
  CHECK(f.offset == 0);
  CHECK(g.offset == 2 * K);
  CHECK(s.high_water() == 10 * K);
  // Nothing free: the slab grows.
  CHECK(s.place(K, 9).offset == 10 * K);
  CHECK(s.high_water() == 11 * K);
  // Releasing neighbours makes one block: [4K, 6K), [6K, 9K) and [2K, 4K) coalesce into [2K, 9K).
  s.release(b.block, 10, kComputeQueue, 11);
  s.release(e.block, 11, kComputeQueue, 12);
  s.release(g.block, 12, kComputeQueue, 13);
  CHECK(s.place(7 * K, 13).offset == 2 * K);
  CHECK(s.live_bytes() == 2 * K + 7 * K + K + K);
}

TEST_CASE("a free block at the top is extended, not left behind") {
  SlabAllocator s;
  s.place(2 * K, 0);
  const auto top = s.place(2 * K, 1);
  s.release(top.block, 2, kComputeQueue, 3);
  CHECK(s.place(5 * K, 3).offset == top.offset);
  CHECK(s.high_water() == 7 * K);
}

TEST_CASE("memory released by an op issued later is not reused") {
  SlabAllocator s;
  const auto a = s.place(2 * K, 0);
  s.place(K, 1);
  s.release(a.block, 5, kCopyQueue, 1);      // released (in time) by op 5
  CHECK(s.place(2 * K, 4).offset == 3 * K);  // op 4 was issued before op 5: fresh memory
  CHECK(s.place(2 * K, 6).offset == a.offset);  // op 6 may reuse it
}

TEST_CASE("a placement says, per queue, the latest op whose release it reuses") {
  SlabAllocator s;
  const auto a = s.place(K, 0);
  const auto b = s.place(K, 1);
  s.place(K, 2);  // keeps the two below from being the top
  s.release(a.block, 3, kCopyQueue, 7);
  s.release(b.block, 4, kComputeQueue, 3);  // coalesces with a: both histories
  const SlabAllocator::Placement p = s.place(2 * K, 5);
  CHECK(p.offset == 0);
  CHECK(p.reuses[kCopyQueue] == 7);
  CHECK(p.reuses[kComputeQueue] == 3);
  // Fresh memory has no history.
  CHECK(s.place(K, 6).reuses == QueueClock{});
}

TEST_CASE("random requests: blocks never overlap, live bytes add up, every release coalesces") {
  std::mt19937_64 rng(7);
  SlabAllocator s;
  struct Live {
    SlabAllocator::Placement at;
    uint64_t bytes;
  };
  std::vector<Live> live;
  uint64_t sum = 0;
  for (uint32_t op = 0; op < 4000; ++op) {
    if (!live.empty() && rng() % 2) {
      const size_t k = rng() % live.size();
      s.release(live[k].at.block, op, kComputeQueue, static_cast<int32_t>(op + 1));
      sum -= live[k].bytes;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      const uint64_t bytes = K * (1 + rng() % 64);
      live.push_back({s.place(bytes, op), bytes});
      sum += bytes;
    }
    CHECK(s.live_bytes() == sum);
  }
  std::sort(live.begin(), live.end(), [](const Live& a, const Live& b) { return a.at.offset < b.at.offset; });
  for (size_t i = 1; i < live.size(); ++i) CHECK(live[i - 1].at.offset + live[i - 1].bytes <= live[i].at.offset);
  CHECK(live.back().at.offset + live.back().bytes <= s.high_water());
  // Everything released: one free block of the whole slab takes a request of that size in place.
  for (const Live& x : live) s.release(x.at.block, 5000, kComputeQueue, 5001);
  const uint64_t high = s.high_water();
  CHECK(s.place(high, 6000).offset == 0);
  CHECK(s.high_water() == high);
}

namespace {

// The placement policy written as plainly as possible: the pieces in offset order in one vector,
// each with the op that released it; best fit by scanning every piece, then every extent. The
// allocator must place exactly as this does. `to_place` says which ops may still place (empty:
// any op may come, so only pieces released by one op merge).
class ReferenceSlab {
 public:
  explicit ReferenceSlab(const std::vector<bool>* to_place = nullptr) : to_place_(to_place) {}

  uint64_t place(uint64_t bytes, uint32_t op) {
    const auto reusable = [&](size_t i) { return !blocks_[i].live && blocks_[i].released < static_cast<int64_t>(op); };
    size_t best = blocks_.size();
    for (size_t i = 0; i < blocks_.size(); ++i) {  // single pieces; offset order: the first is the lowest
      if (!reusable(i) || blocks_[i].size < bytes) continue;
      if (best == blocks_.size() || blocks_[i].size < blocks_[best].size) best = i;
    }
    if (best == blocks_.size()) {  // extents: maximal runs of reusable pieces
      uint64_t best_size = 0;
      for (size_t i = 0; i < blocks_.size(); ++i) {
        if (!reusable(i) || (i > 0 && reusable(i - 1))) continue;
        uint64_t size = 0;
        for (size_t j = i; j < blocks_.size() && reusable(j); ++j) size += blocks_[j].size;
        if (size >= bytes && (best == blocks_.size() || size < best_size)) {
          best = i;
          best_size = size;
        }
      }
      const uint64_t best_offset = best < blocks_.size() ? blocks_[best].offset : 0;
      for (size_t i = 0; i + 1 < blocks_.size(); ++i) {  // pieces nothing still to place tells apart merge
        while (i + 1 < blocks_.size() && reusable(i) && reusable(i + 1) && mergeable(i, i + 1)) merge(i);
      }
      if (best < blocks_.size()) {
        best = 0;
        while (blocks_[best].offset != best_offset) ++best;
      }
    }
    int64_t rest_released = -1;
    if (best < blocks_.size()) {
      rest_released = blocks_[best].released;
      while (blocks_[best].size < bytes) {
        rest_released = blocks_[best + 1].released;
        merge(best);
      }
    } else if (!blocks_.empty() && reusable(blocks_.size() - 1)) {
      best = blocks_.size() - 1;  // the reusable extent at the top grows to the request
      while (best > 0 && reusable(best - 1)) --best;
      while (best + 1 < blocks_.size()) merge(best);
      blocks_[best].size = bytes;
    } else {
      const uint64_t top = blocks_.empty() ? 0 : blocks_.back().offset + blocks_.back().size;
      blocks_.push_back({top, bytes, false, -1});
      best = blocks_.size() - 1;
    }
    Block& b = blocks_[best];
    if (b.size > bytes) {
      blocks_.insert(blocks_.begin() + static_cast<std::ptrdiff_t>(best) + 1, {b.offset + bytes, b.size - bytes, false, rest_released});
    }
    Block& placed = blocks_[best];
    placed.size = bytes;
    placed.live = true;
    placed.released = -1;
    high_ = std::max(high_, blocks_.back().offset + blocks_.back().size);
    return placed.offset;
  }
  void release(uint64_t offset, uint32_t op) {
    size_t i = 0;
    while (blocks_[i].offset != offset) ++i;
    blocks_[i].live = false;
    blocks_[i].released = op;
    if (i + 1 < blocks_.size() && mergeable(i, i + 1)) merge(i);
    if (i > 0 && mergeable(i - 1, i)) merge(i - 1);
  }
  uint64_t high_water() const { return high_; }

 private:
  struct Block {
    uint64_t offset, size;
    bool live;
    int64_t released;
  };
  bool mergeable(size_t i, size_t j) const {
    const Block &a = blocks_[i], &b = blocks_[j];
    if (a.live || b.live) return false;
    if (a.released == b.released) return true;
    if (to_place_ == nullptr) return false;
    for (int64_t op = std::min(a.released, b.released) + 1; op <= std::max(a.released, b.released); ++op) {
      if ((*to_place_)[static_cast<size_t>(op)]) return false;
    }
    return true;
  }
  void merge(size_t i) {  // block i absorbs block i + 1
    blocks_[i].size += blocks_[i + 1].size;
    blocks_[i].released = std::max(blocks_[i].released, blocks_[i + 1].released);
    blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  }
  const std::vector<bool>* to_place_;
  std::vector<Block> blocks_;
  uint64_t high_ = 0;
};

}  // namespace

TEST_CASE("random requests: the allocator places exactly as the plain best-fit scan") {
  // Sizes from a few classes (many equal sizes: ties broken by offset) and ops numbered out of
  // time order (releases by ops issued after the placing one are not reusable).
  for (uint64_t seed : {1, 2, 3}) {
    std::mt19937_64 rng(seed);
    for (bool track : {false, true}) {
      SlabAllocator s(track);
      ReferenceSlab ref;
      struct Live {
        SlabAllocator::Handle block;
        uint64_t offset;
      };
      std::vector<Live> live;
      for (uint32_t step = 0; step < 20000; ++step) {
        const uint32_t op = step / 4 + static_cast<uint32_t>(rng() % 64);
        if (!live.empty() && rng() % 100 < 48) {
          const size_t k = rng() % live.size();
          s.release(live[k].block, op, kComputeQueue, static_cast<int32_t>(step));
          ref.release(live[k].offset, op);
          live[k] = live.back();
          live.pop_back();
        } else {
          const uint64_t bytes = K * (rng() % 4 == 0 ? 1 + rng() % 256 : uint64_t{1} << (rng() % 6));
          const SlabAllocator::Placement p = s.place(bytes, op);
          const uint64_t expected = ref.place(bytes, op);
          REQUIRE(p.offset == expected);
          live.push_back({p.block, p.offset});
        }
        REQUIRE(s.high_water() == ref.high_water());
      }
    }
  }
}

TEST_CASE("random programs on queues that run ahead: placement as the plain scan, following the ops still to place") {
  // Ops 0..n-1 in program order, each on one of three queues; a queue runs its ops in order, the
  // queues interleave at random in time. Op i places one block and releases blocks placed
  // before it in time.
  for (uint64_t seed : {11, 12, 13}) {
    std::mt19937_64 rng(seed);
    constexpr uint32_t n = 6000;
    std::array<std::vector<uint32_t>, 3> queue;
    for (uint32_t i = 0; i < n; ++i) queue[rng() % 3].push_back(i);
    std::array<size_t, 3> next{};
    PlacementFrontier frontier;
    frontier.reset(n);
    std::vector<bool> to_place(n, true);
    SlabAllocator s;
    s.follow(&frontier);
    ReferenceSlab ref(&to_place);
    struct Live {
      SlabAllocator::Handle block;
      uint64_t offset;
    };
    std::vector<Live> live;
    uint32_t releases_seen = 0;
    for (uint32_t done = 0; done < n; ++done) {
      size_t q = rng() % 3;
      while (next[q] == queue[q].size()) q = (q + 1) % 3;
      const uint32_t op = queue[q][next[q]++];
      const uint64_t bytes = K * (rng() % 4 == 0 ? 1 + rng() % 64 : uint64_t{1} << (rng() % 5));
      const SlabAllocator::Placement p = s.place(bytes, op);
      REQUIRE(p.offset == ref.place(bytes, op));
      live.push_back({p.block, p.offset});
      frontier.placed(op);
      to_place[op] = false;
      for (int r = 0; r < 2 && live.size() > 1 && rng() % 2; ++r) {
        const size_t k = rng() % (live.size() - 1);
        s.release(live[k].block, op, static_cast<int>(q), static_cast<int32_t>(next[q]));
        ref.release(live[k].offset, op);
        live[k] = live[live.size() - 2];
        live[live.size() - 2] = live.back();
        live.pop_back();
        ++releases_seen;
      }
      REQUIRE(s.high_water() == ref.high_water());
      REQUIRE(s.live_bytes() <= s.high_water());
    }
    CHECK(releases_seen > 1000);
  }
}

TEST_CASE("a release by an op issued later breaks a hole but does not hide the memory beside it") {
  // [a 2K][b 2K][c K]: a released by op 3, b by op 9 (its queue ran ahead), op 5 still to place.
  PlacementFrontier frontier;
  frontier.reset(16);
  SlabAllocator s;
  s.follow(&frontier);
  const auto a = s.place(2 * K, 0);
  const auto b = s.place(2 * K, 1);
  s.place(K, 2);
  for (uint32_t op : {0, 1, 2}) frontier.placed(op);
  s.release(a.block, 3, kComputeQueue, 1);
  s.release(b.block, 9, kCopyQueue, 1);
  // Op 5 may reuse a (released by op 3) but not b: a 2K request takes a in place, where one
  // block with b's later release would have made the slab grow.
  CHECK(s.place(2 * K, 5).offset == a.offset);
  CHECK(s.high_water() == 5 * K);
}

TEST_CASE("neighbours merge once no op still to place was issued between their releases") {
  // [a 2K][b 2K][c K]; op 5 is still to place when a (op 3) and b (op 9) are released, so they
  // stay two pieces: a 4K request by op 4 (which may reuse a only) grows the slab. Once ops 4-9
  // have placed, a 4K request by op 10 takes a and b as one extent, in place.
  PlacementFrontier frontier;
  frontier.reset(16);
  SlabAllocator s;
  s.follow(&frontier);
  const auto a = s.place(2 * K, 0);
  const auto b = s.place(2 * K, 1);
  s.place(K, 2);
  for (uint32_t op : {0, 1, 2}) frontier.placed(op);
  CHECK(frontier.to_place_between(2, 3));
  s.release(a.block, 3, kComputeQueue, 1);
  s.release(b.block, 9, kCopyQueue, 1);
  CHECK(s.place(4 * K, 4).offset == 5 * K);
  for (uint32_t op = 4; op <= 9; ++op) frontier.placed(op);
  CHECK_FALSE(frontier.to_place_between(3, 9));
  CHECK(frontier.to_place_between(3, 10));
  CHECK(s.place(4 * K, 10).offset == 0);
  CHECK(s.high_water() == 9 * K);
}

TEST_CASE("the frontier: the first op still to place, over ops that allocate nothing") {
  PlacementFrontier f;
  f.reset(8);
  CHECK(f.next_to_place(0) == 0);
  for (uint32_t op : {0, 1, 3, 4}) f.placed(op);
  CHECK(f.next_to_place(0) == 2);
  CHECK(f.next_to_place(3) == 5);
  f.placed(2);
  CHECK(f.next_to_place(0) == 5);
  CHECK_FALSE(f.to_place_between(0, 4));
  CHECK(f.to_place_between(0, 5));
  for (uint32_t op : {5, 6, 7}) f.placed(op);
  CHECK(f.next_to_place(0) == 8);  // none left: the number of ops
}

TEST_CASE("the frontier against a plain scan: random placements over 10,000 ops (three summary words)") {
  std::mt19937_64 gen(7);
  const uint32_t n = 10000;
  PlacementFrontier f;
  f.reset(n);
  std::vector<bool> to_place(n, true);
  const auto scan = [&](uint32_t op) {
    while (op < n && !to_place[op]) ++op;
    return std::min(op, n);
  };
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), gen);
  for (uint32_t k = 0; k < n; ++k) {
    f.placed(order[k]);
    to_place[order[k]] = false;
    if (k % 97 != 0 && k + 1 != n) continue;
    for (int q = 0; q < 50; ++q) {
      const auto a = static_cast<uint32_t>(gen() % (n + 2));
      const auto b = static_cast<uint32_t>(gen() % (n + 2));
      CHECK(f.next_to_place(a) == scan(a));
      const uint32_t lo = std::min(a, b), hi = std::max(a, b);
      CHECK(f.to_place_between(lo, hi) == (scan(lo + 1) <= hi));
    }
  }
  CHECK(f.next_to_place(0) == n);
}

namespace {

Op on(Stream stream, OpKind kind = OpKind::elementwise, GroupKind group = GroupKind::fsdp) {
  Op op;
  op.stream = stream;
  op.kind = kind;
  op.group = group;
  return op;
}

}  // namespace

TEST_CASE("ordering clocks: queue order and dependencies, transitively") {
  Program p;
  ProgramWriter w(p);
  const uint32_t c0 = w.add(on(Stream::compute), "c0");
  const uint32_t x0 = w.add(on(Stream::copy), "x0");  // no dependency: unordered with c0
  const uint32_t c1 = w.add(on(Stream::compute), "c1");
  const uint32_t x1 = w.add(on(Stream::copy), "x1");
  w.depend(x1, c1);  // x1 after c1, hence after c0
  const uint32_t c2 = w.add(on(Stream::compute), "c2");
  w.depend(c2, x0);
  const auto clk = ordering_clocks(p);
  CHECK(clk[c0] == QueueClock{});
  CHECK(clk[x0] == QueueClock{});
  CHECK(clk[c1][kComputeQueue] == 1);
  CHECK(clk[c1][kCopyQueue] == 0);
  CHECK(clk[x1][kComputeQueue] == 2);
  CHECK(clk[x1][kCopyQueue] == 1);
  CHECK(clk[c2][kComputeQueue] == 2);
  CHECK(clk[c2][kCopyQueue] == 1);
}

TEST_CASE("plan_slab: a reuse across queues waits for the release unless already ordered") {
  Program p;
  ProgramWriter w(p);
  const uint32_t a = w.buffer(K, MemCategory::activation, "a");
  const uint32_t b = w.buffer(K, MemCategory::activation, "b");
  const uint32_t c = w.buffer(K, MemCategory::activation, "c");
  const uint32_t make = w.add(on(Stream::compute), "make");
  w.effect(make, a, MemAction::alloc);
  const uint32_t out = w.add(on(Stream::copy), "swap_out");  // releases a's HBM at its end
  w.depend(out, make);
  w.effect(out, a, MemAction::to_host);
  const uint32_t next = w.add(on(Stream::compute), "next");  // not ordered after the swap-out
  w.effect(next, b, MemAction::alloc);
  const uint32_t ordered = w.add(on(Stream::compute), "ordered");
  w.depend(ordered, out);
  w.effect(ordered, b, MemAction::free);
  const uint32_t last = w.add(on(Stream::compute), "last");
  w.effect(last, c, MemAction::alloc);
  w.effect(last, c, MemAction::free);
  const uint32_t in = w.add(on(Stream::copy), "swap_in");
  w.effect(in, a, MemAction::to_device);
  const uint32_t use = w.add(on(Stream::compute), "use");
  w.depend(use, in);
  w.effect(use, a, MemAction::free);

  // Timeline: the swap-out ends (t=20) before `next` starts (t=30): next reuses a's block and
  // must wait for the swap-out. `last` reuses b's block, released on its own queue: no wait.
  // The swap-in (t=60) reuses memory `ordered`/`last` released on compute, which its queue does
  // not order before it: it waits for the latest of them.
  const std::vector<Picoseconds> starts{0, 10, 30, 40, 50, 60, 70};
  const std::vector<Picoseconds> ends{10, 20, 40, 45, 55, 65, 80};
  const SlabPlan plan = plan_slab(p, starts, ends);
  CHECK(plan.slab_bytes == K);
  CHECK(plan.waits[next] == std::vector<uint32_t>{out});
  CHECK(plan.waits[ordered].empty());
  CHECK(plan.waits[last].empty());
  CHECK(plan.waits[in] == std::vector<uint32_t>{last});
  CHECK(plan.waits[use].empty());

  // If the swap-out ends after `next` starts, `next` takes fresh memory and waits for nothing.
  std::vector<Picoseconds> late_ends = ends;
  late_ends[out] = 35;
  const SlabPlan late = plan_slab(p, starts, late_ends);
  CHECK(late.slab_bytes == 2 * K);
  CHECK(late.waits[next].empty());
}

TEST_CASE("plan_slab on random programs: memory is shared only by blocks the plan orders one after the other") {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    Program p;
    ProgramWriter w(p);
    const int n_ops = 40;
    std::vector<uint32_t> live;
    std::vector<uint32_t> allocated_by;
    const Stream streams[] = {Stream::compute, Stream::copy, Stream::comm};
    for (int i = 0; i < n_ops; ++i) {
      const Stream st = streams[rng() % 3];
      const uint32_t op = w.add(on(st, st == Stream::comm ? OpKind::all_gather : OpKind::elementwise), "op");
      if (op > 0 && rng() % 2) w.depend(op, static_cast<uint32_t>(rng() % op));
      const bool last = i == n_ops - 1;
      if (!last && rng() % 3 != 0) {
        const uint32_t b = w.buffer(static_cast<double>(1 + rng() % (8 * K)), MemCategory::activation, "b");
        w.effect(op, b, MemAction::alloc);
        live.push_back(b);
        allocated_by.push_back(op);
      }
      while (!live.empty() && (last || rng() % 3 == 0)) {
        const size_t k = rng() % live.size();
        w.order_after(op, allocated_by[live[k]]);  // a release follows its allocation
        w.effect(op, live[k], MemAction::free);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      }
    }
    // A timeline consistent with the program: each op starts after its queue predecessor and its
    // dependencies end.
    std::vector<Picoseconds> starts(p.ops.size()), ends(p.ops.size());
    std::array<Picoseconds, kNumQueues> queue_free{};
    for (uint32_t i = 0; i < p.ops.size(); ++i) {
      Picoseconds t = queue_free[static_cast<size_t>(queue_of(p.ops[i]))];
      for (uint32_t d : p.deps_of(p.ops[i])) t = std::max(t, ends[d]);
      starts[i] = t + static_cast<Picoseconds>(rng() % 5);
      ends[i] = starts[i] + 1 + static_cast<Picoseconds>(rng() % 20);
      queue_free[static_cast<size_t>(queue_of(p.ops[i]))] = ends[i];
    }
    const SlabPlan plan = plan_slab(p, starts, ends);

    // Every buffer's life in time and its block.
    struct Life {
      Picoseconds from, to;
      uint64_t offset, bytes;
      uint32_t born_at, freed_at;
    };
    std::vector<Life> lives;
    std::vector<Life> open(p.buffers.size());
    for (uint32_t i = 0; i < p.ops.size(); ++i) {
      for (size_t k = 0; k < plan.order.alloc_at_start[i].size(); ++k) {
        const uint32_t b = plan.order.alloc_at_start[i][k];
        open[b] = Life{starts[i], 0, plan.offsets[i][k], slab_block_bytes(p.buffers[b].bytes), i, 0};
      }
      for (uint32_t b : plan.order.free_at_end[i]) {
        Life x = open[b];
        x.to = ends[i];
        x.freed_at = i;
        lives.push_back(x);
      }
    }
    // Ordering with the waits: queue order, dependencies, waits (transitively).
    const size_t n = p.ops.size();
    std::vector<std::vector<char>> before(n, std::vector<char>(n, 0));  // before[a][b]: a ends before b starts
    std::array<int64_t, kNumQueues> last{};
    last.fill(-1);
    for (uint32_t i = 0; i < n; ++i) {
      std::vector<uint32_t> direct(p.deps_of(p.ops[i]).begin(), p.deps_of(p.ops[i]).end());
      direct.insert(direct.end(), plan.waits[i].begin(), plan.waits[i].end());
      if (last[static_cast<size_t>(queue_of(p.ops[i]))] >= 0) direct.push_back(static_cast<uint32_t>(last[static_cast<size_t>(queue_of(p.ops[i]))]));
      for (uint32_t d : direct) {
        before[d][i] = 1;
        for (uint32_t a = 0; a < n; ++a) before[a][i] |= before[a][d];
      }
      last[static_cast<size_t>(queue_of(p.ops[i]))] = i;
    }
    CAPTURE(trial);
    for (size_t x = 0; x < lives.size(); ++x) {
      for (size_t y = 0; y < lives.size(); ++y) {
        const Life& a = lives[x];
        const Life& b = lives[y];
        const bool share = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
        if (x == y || !share) continue;
        // Blocks that share memory are never live at once, and the later one is ordered after
        // the earlier one's release: by the program or by a wait.
        const bool a_first = a.to <= b.from;
        CHECK((a_first || b.to <= a.from));
        const Life& first = a_first ? a : b;
        const Life& second = a_first ? b : a;
        CHECK((first.freed_at == second.born_at ? false : before[first.freed_at][second.born_at] != 0));
      }
    }
    // The live peak (releases first at equal times, as plan_slab orders them).
    uint64_t peak = 0;
    for (const Life& x : lives) {
      uint64_t at = 0;
      for (const Life& y : lives) {
        if (y.from <= x.from && x.from < y.to) at += y.bytes;
      }
      peak = std::max(peak, at);
    }
    CHECK(plan.slab_bytes >= peak);
    // Every wait points to an earlier op on another queue.
    for (uint32_t i = 0; i < p.ops.size(); ++i) {
      for (uint32_t d : plan.waits[i]) {
        CHECK(d < p.ops.size());
        CHECK(queue_of(p.ops[d]) != queue_of(p.ops[i]));
        CHECK(ends[d] <= starts[i]);
      }
    }
  }
}
