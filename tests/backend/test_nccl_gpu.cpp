// SPDX-License-Identifier: MIT
// NCCL collectives over every local GPU (one rank each) against host computations: all-reduce and
// reduce-scatter sums within FP32 accumulation bounds, all-gather and all-to-all(v) bit-exact.
#include <doctest/doctest.h>

#include <numeric>

#include "backend/cuda/buffer.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/nccl_group.hpp"
#include "test_util.hpp"

using namespace moesim::cuda;
using namespace moesim::cuda::test;

namespace {

struct Ranks {
  std::vector<DeviceBuffer<float>> send, recv;
  std::vector<std::vector<float>> host;
  std::vector<const void*> sp;
  std::vector<void*> rp;
};

Ranks make(NcclGroup& g, size_t send_count, size_t recv_count) {
  Ranks r;
  for (int i = 0; i < g.size(); ++i) {
    MOESIM_CUDA_CHECK(cudaSetDevice(g.device(i)));
    r.host.push_back(random_f32(send_count));
    r.send.push_back(to_device(r.host.back()));
    r.recv.emplace_back(recv_count);
    r.recv.back().fill_bytes(0xFF);
    r.sp.push_back(r.send.back().data());
    r.rp.push_back(r.recv.back().data());
  }
  return r;
}

std::vector<float> download(NcclGroup& g, Ranks& r, int i) {
  MOESIM_CUDA_CHECK(cudaSetDevice(g.device(i)));
  return r.recv[static_cast<size_t>(i)].download();
}

}  // namespace

TEST_CASE("all-reduce, all-gather, reduce-scatter and all-to-all-v over the local GPUs") {
  const int n = device_count();
  std::vector<int> devices(static_cast<size_t>(n));
  std::iota(devices.begin(), devices.end(), 0);
  NcclGroup g(devices);
  MESSAGE("ranks: " << n);
  const size_t count = 100003;  // odd: no rank gets a rounded share

  {
    Ranks r = make(g, count, count);
    g.all_reduce(r.sp, r.rp, count, ncclFloat32);
    g.synchronize();
    std::vector<double> sum(count, 0.0), mag(count, 0.0);
    for (const auto& h : r.host) {
      for (size_t i = 0; i < count; ++i) {
        sum[i] += h[i];
        mag[i] += std::abs(h[i]);
      }
    }
    for (int i = 0; i < n; ++i) {
      check_f32("all_reduce rank " + std::to_string(i), download(g, r, i), sum,
                [&](size_t j) { return (n + 1) * kFp32Eps * mag[j]; });
    }
  }
  {
    Ranks r = make(g, count, count * static_cast<size_t>(n));
    g.all_gather(r.sp, r.rp, count, ncclFloat32);
    g.synchronize();
    std::vector<float> want;
    for (const auto& h : r.host) want.insert(want.end(), h.begin(), h.end());
    for (int i = 0; i < n; ++i) CHECK(download(g, r, i) == want);
  }
  {
    Ranks r = make(g, count * static_cast<size_t>(n), count);
    g.reduce_scatter(r.sp, r.rp, count, ncclFloat32);
    g.synchronize();
    for (int i = 0; i < n; ++i) {
      std::vector<double> sum(count, 0.0), mag(count, 0.0);
      for (const auto& h : r.host) {
        for (size_t j = 0; j < count; ++j) {
          sum[j] += h[static_cast<size_t>(i) * count + j];
          mag[j] += std::abs(h[static_cast<size_t>(i) * count + j]);
        }
      }
      check_f32("reduce_scatter rank " + std::to_string(i), download(g, r, i), sum,
                [&](size_t j) { return (n + 1) * kFp32Eps * mag[j]; });
    }
  }
  {
    // Uneven counts, some zero: rank s sends counts[s][p] elements to p.
    std::uniform_int_distribution<size_t> pick(0, 5000);
    std::vector<std::vector<size_t>> counts(static_cast<size_t>(n), std::vector<size_t>(static_cast<size_t>(n)));
    for (auto& row : counts) {
      for (auto& c : row) c = pick(rng());
    }
    counts[0][static_cast<size_t>(n - 1)] = 0;
    size_t max_total = 0;
    for (int s = 0; s < n; ++s) {
      size_t out = 0, in = 0;
      for (int p = 0; p < n; ++p) {
        out += counts[static_cast<size_t>(s)][static_cast<size_t>(p)];
        in += counts[static_cast<size_t>(p)][static_cast<size_t>(s)];
      }
      max_total = std::max({max_total, out, in});
    }
    Ranks r = make(g, max_total, max_total);
    g.all_to_all_v(r.sp, r.rp, counts, ncclFloat32);
    g.synchronize();
    for (int p = 0; p < n; ++p) {
      std::vector<float> want;
      for (int s = 0; s < n; ++s) {
        size_t off = 0;
        for (int q = 0; q < p; ++q) off += counts[static_cast<size_t>(s)][static_cast<size_t>(q)];
        const auto& h = r.host[static_cast<size_t>(s)];
        want.insert(want.end(), h.begin() + static_cast<std::ptrdiff_t>(off),
                    h.begin() + static_cast<std::ptrdiff_t>(off + counts[static_cast<size_t>(s)][static_cast<size_t>(p)]));
      }
      auto got = download(g, r, p);
      got.resize(want.size());
      CHECK(got == want);
    }
  }
}
