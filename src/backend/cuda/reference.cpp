// SPDX-License-Identifier: MIT
#include "backend/cuda/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace moesim::cuda::ref {

std::vector<double> to_double(std::span<const bf16_bits> x) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = bf16_to_float(x[i]);
  return out;
}

std::vector<double> gemm(std::span<const bf16_bits> a, std::span<const bf16_bits> b, int64_t m, int64_t n, int64_t k,
                         bool ta, bool tb, std::vector<double>* abs_sum) {
  const std::vector<double> ad = to_double(a);
  const std::vector<double> bd = to_double(b);
  std::vector<double> c(static_cast<size_t>(m * n));
  if (abs_sum) abs_sum->assign(c.size(), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      double mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = ta ? ad[static_cast<size_t>(p * m + i)] : ad[static_cast<size_t>(i * k + p)];
        const double y = tb ? bd[static_cast<size_t>(j * k + p)] : bd[static_cast<size_t>(p * n + j)];
        acc += x * y;
        mag += std::abs(x * y);
      }
      c[static_cast<size_t>(i * n + j)] = acc;
      if (abs_sum) (*abs_sum)[static_cast<size_t>(i * n + j)] = mag;
    }
  }
  return c;
}

RmsNormForward rmsnorm_forward(std::span<const bf16_bits> x, std::span<const bf16_bits> w, int64_t rows, int64_t cols,
                               double eps) {
  RmsNormForward out;
  out.y.resize(static_cast<size_t>(rows * cols));
  out.rstd.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double v = bf16_to_float(x[static_cast<size_t>(r * cols + c)]);
      ss += v * v;
    }
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
    out.rstd[static_cast<size_t>(r)] = rstd;
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      out.y[i] = bf16_to_float(x[i]) * rstd * bf16_to_float(w[static_cast<size_t>(c)]);
    }
  }
  return out;
}

RmsNormBackward rmsnorm_backward(std::span<const bf16_bits> x, std::span<const bf16_bits> w,
                                 std::span<const bf16_bits> dy, int64_t rows, int64_t cols, double eps) {
  const RmsNormForward fwd = rmsnorm_forward(x, w, rows, cols, eps);
  RmsNormBackward out;
  out.dx.resize(static_cast<size_t>(rows * cols));
  out.dw.assign(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double rstd = fwd.rstd[static_cast<size_t>(r)];
    double dot = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      dot += bf16_to_float(dy[i]) * bf16_to_float(w[static_cast<size_t>(c)]) * bf16_to_float(x[i]) * rstd;
    }
    const double mean = dot / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      const double xhat = bf16_to_float(x[i]) * rstd;
      const double g = bf16_to_float(dy[i]) * bf16_to_float(w[static_cast<size_t>(c)]);
      out.dx[i] = rstd * (g - xhat * mean);
      out.dw[static_cast<size_t>(c)] += bf16_to_float(dy[i]) * xhat;
    }
  }
  return out;
}

namespace {
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

std::vector<double> swiglu_forward(std::span<const bf16_bits> h, int64_t rows, int64_t f) {
  std::vector<double> y(static_cast<size_t>(rows * f));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < f; ++c) {
      const double g = bf16_to_float(h[static_cast<size_t>(r * 2 * f + c)]);
      const double u = bf16_to_float(h[static_cast<size_t>(r * 2 * f + f + c)]);
      y[static_cast<size_t>(r * f + c)] = g * sigmoid(g) * u;
    }
  }
  return y;
}

std::vector<double> swiglu_backward(std::span<const bf16_bits> h, std::span<const bf16_bits> dy, int64_t rows,
                                    int64_t f) {
  std::vector<double> dh(static_cast<size_t>(rows * 2 * f));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < f; ++c) {
      const double g = bf16_to_float(h[static_cast<size_t>(r * 2 * f + c)]);
      const double u = bf16_to_float(h[static_cast<size_t>(r * 2 * f + f + c)]);
      const double d = bf16_to_float(dy[static_cast<size_t>(r * f + c)]);
      const double s = sigmoid(g);
      dh[static_cast<size_t>(r * 2 * f + c)] = d * u * s * (1 + g * (1 - s));
      dh[static_cast<size_t>(r * 2 * f + f + c)] = d * g * s;
    }
  }
  return dh;
}

std::vector<double> router_scores(std::span<const float> logits, int64_t tokens, int num_experts, bool softmax) {
  std::vector<double> s(logits.size());
  const size_t e = static_cast<size_t>(num_experts);
  for (int64_t t = 0; t < tokens; ++t) {
    const size_t base = static_cast<size_t>(t) * e;
    if (!softmax) {
      for (size_t i = 0; i < e; ++i) s[base + i] = sigmoid(logits[base + i]);
      continue;
    }
    double mx = -std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < e; ++i) mx = std::max(mx, static_cast<double>(logits[base + i]));
    double sum = 0;
    for (size_t i = 0; i < e; ++i) sum += s[base + i] = std::exp(logits[base + i] - mx);
    for (size_t i = 0; i < e; ++i) s[base + i] /= sum;
  }
  return s;
}

TopK router_topk(std::span<const double> scores, std::span<const float> bias, int64_t tokens, int num_experts,
                 int top_k, bool normalize) {
  TopK out;
  out.index.resize(static_cast<size_t>(tokens * top_k));
  out.weight.resize(out.index.size());
  std::vector<int32_t> order(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < tokens; ++t) {
    const size_t base = static_cast<size_t>(t * num_experts);
    const auto key = [&](int32_t e) { return scores[base + static_cast<size_t>(e)] + (bias.empty() ? 0.0 : bias[static_cast<size_t>(e)]); };
    for (int32_t e = 0; e < num_experts; ++e) order[static_cast<size_t>(e)] = e;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key(a) > key(b); });
    double sum = 0;
    for (int j = 0; j < top_k; ++j) sum += scores[base + static_cast<size_t>(order[static_cast<size_t>(j)])];
    for (int j = 0; j < top_k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      out.index[static_cast<size_t>(t * top_k + j)] = e;
      out.weight[static_cast<size_t>(t * top_k + j)] = scores[base + static_cast<size_t>(e)] / (normalize ? sum : 1.0);
    }
  }
  return out;
}

PermutePlan permute_plan(std::span<const int32_t> expert_index, int num_experts) {
  PermutePlan p;
  p.counts.assign(static_cast<size_t>(num_experts), 0);
  for (int32_t e : expert_index) {
    if (e < 0 || e >= num_experts) throw std::out_of_range("permute_plan: expert index out of range");
    ++p.counts[static_cast<size_t>(e)];
  }
  p.offsets.assign(static_cast<size_t>(num_experts) + 1, 0);
  for (size_t e = 0; e < p.counts.size(); ++e) p.offsets[e + 1] = p.offsets[e] + p.counts[e];
  std::vector<int32_t> next(p.offsets.begin(), p.offsets.end() - 1);
  p.dest_row.resize(expert_index.size());
  for (size_t a = 0; a < expert_index.size(); ++a) p.dest_row[a] = next[static_cast<size_t>(expert_index[a])]++;
  return p;
}

std::vector<double> unpermute_combine(std::span<const bf16_bits> yp, std::span<const int32_t> dest_row,
                                      std::span<const float> weight, int64_t tokens, int top_k, int64_t cols) {
  std::vector<double> y(static_cast<size_t>(tokens * cols), 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < top_k; ++j) {
      const size_t a = static_cast<size_t>(t * top_k + j);
      const int64_t row = dest_row[a];
      for (int64_t c = 0; c < cols; ++c) {
        y[static_cast<size_t>(t * cols + c)] += weight[a] * static_cast<double>(bf16_to_float(yp[static_cast<size_t>(row * cols + c)]));
      }
    }
  }
  return y;
}

CrossEntropy cross_entropy(std::span<const double> logits, std::span<const int32_t> targets, int64_t rows,
                           int64_t vocab, double grad_scale) {
  CrossEntropy out;
  out.loss.resize(static_cast<size_t>(rows));
  out.dlogits.resize(static_cast<size_t>(rows * vocab));
  for (int64_t r = 0; r < rows; ++r) {
    const size_t base = static_cast<size_t>(r * vocab);
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, logits[base + static_cast<size_t>(v)]);
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(logits[base + static_cast<size_t>(v)] - mx);
    const int32_t target = targets[static_cast<size_t>(r)];
    out.loss[static_cast<size_t>(r)] = std::log(sum) + mx - logits[base + static_cast<size_t>(target)];
    for (int64_t v = 0; v < vocab; ++v) {
      const double p = std::exp(logits[base + static_cast<size_t>(v)] - mx) / sum;
      out.dlogits[base + static_cast<size_t>(v)] = grad_scale * (p - (v == target ? 1.0 : 0.0));
    }
  }
  return out;
}

void adamw_step(AdamWState& s, std::span<const float> grad, double lr, double beta1, double beta2, double eps,
                double weight_decay, int64_t step) {
  const double bc1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1 - std::pow(beta2, static_cast<double>(step));
  for (size_t i = 0; i < grad.size(); ++i) {
    const double g = grad[i];
    s.m[i] = beta1 * s.m[i] + (1 - beta1) * g;
    s.v[i] = beta2 * s.v[i] + (1 - beta2) * g * g;
    s.master[i] -= lr * (s.m[i] / bc1 / (std::sqrt(s.v[i] / bc2) + eps) + weight_decay * s.master[i]);
  }
}

namespace {
int64_t clamp_row(int32_t id, int64_t rows) { return id < 0 ? 0 : (id >= rows ? rows - 1 : id); }
}  // namespace

std::vector<double> gather_rows(std::span<const bf16_bits> table, std::span<const int32_t> ids, int64_t cols,
                                int64_t table_rows) {
  std::vector<double> out(ids.size() * static_cast<size_t>(cols));
  for (size_t r = 0; r < ids.size(); ++r) {
    const int64_t src = clamp_row(ids[r], table_rows);
    for (int64_t c = 0; c < cols; ++c) {
      out[r * static_cast<size_t>(cols) + static_cast<size_t>(c)] = bf16_to_float(table[static_cast<size_t>(src * cols + c)]);
    }
  }
  return out;
}

std::vector<double> scatter_add_rows(std::span<const float> grad, std::span<const bf16_bits> dy,
                                     std::span<const int32_t> ids, int64_t cols, int64_t table_rows) {
  std::vector<double> out(grad.begin(), grad.end());
  for (size_t r = 0; r < ids.size(); ++r) {
    const int64_t dst = clamp_row(ids[r], table_rows);
    for (int64_t c = 0; c < cols; ++c) {
      out[static_cast<size_t>(dst * cols + c)] += bf16_to_float(dy[r * static_cast<size_t>(cols) + static_cast<size_t>(c)]);
    }
  }
  return out;
}

std::vector<double> short_conv(std::span<const bf16_bits> x, std::span<const bf16_bits> w, int64_t rows,
                               int64_t channels, int width, bool transposed) {
  std::vector<double> y(static_cast<size_t>(rows * channels), 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t c = 0; c < channels; ++c) {
      double acc = 0;
      for (int j = 0; j < width; ++j) {
        const int64_t s = transposed ? t + j : t - j;
        if (s < 0 || s >= rows) continue;
        acc += static_cast<double>(bf16_to_float(w[static_cast<size_t>(c * width + j)])) *
               bf16_to_float(x[static_cast<size_t>(s * channels + c)]);
      }
      y[static_cast<size_t>(t * channels + c)] = acc;
    }
  }
  return y;
}

std::vector<double> residual_mix(std::span<const bf16_bits> x, std::span<const float> a, int64_t n) {
  std::vector<double> y(static_cast<size_t>(n), 0.0);
  for (size_t s = 0; s < a.size(); ++s) {
    for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] += a[s] * static_cast<double>(bf16_to_float(x[s * static_cast<size_t>(n) + static_cast<size_t>(i)]));
  }
  return y;
}

std::vector<double> residual_mix_backward(std::span<const bf16_bits> dy, std::span<const float> a) {
  std::vector<double> dx(a.size() * dy.size());
  for (size_t s = 0; s < a.size(); ++s) {
    for (size_t i = 0; i < dy.size(); ++i) dx[s * dy.size() + i] = a[s] * static_cast<double>(bf16_to_float(dy[i]));
  }
  return dx;
}

std::vector<double> repeat_kv_heads(std::span<const bf16_bits> x, int64_t rows, int64_t heads_kv, int group, int64_t d) {
  const int64_t hq = heads_kv * group;
  std::vector<double> y(static_cast<size_t>(rows * hq * d));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < hq; ++h) {
      for (int64_t c = 0; c < d; ++c) {
        y[static_cast<size_t>((r * hq + h) * d + c)] = bf16_to_float(x[static_cast<size_t>((r * heads_kv + h / group) * d + c)]);
      }
    }
  }
  return y;
}

std::vector<double> sum_kv_head_groups(std::span<const float> dy, int64_t rows, int64_t heads_kv, int group, int64_t d) {
  std::vector<double> dx(static_cast<size_t>(rows * heads_kv * d), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < heads_kv; ++j) {
      for (int g = 0; g < group; ++g) {
        for (int64_t c = 0; c < d; ++c) {
          dx[static_cast<size_t>((r * heads_kv + j) * d + c)] += dy[static_cast<size_t>(((r * heads_kv + j) * group + g) * d + c)];
        }
      }
    }
  }
  return dx;
}

std::vector<double> move_bytes(std::span<const bf16_bits> in, int64_t n_out) {
  const auto n_in = static_cast<int64_t>(in.size());
  std::vector<double> out(static_cast<size_t>(n_out), 0.0);
  for (int64_t i = 0; i < n_out; ++i) {
    if (n_in >= n_out) {
      for (int64_t k = i; k < n_in; k += n_out) out[static_cast<size_t>(i)] += bf16_to_float(in[static_cast<size_t>(k)]);
    } else {
      const double ratio = static_cast<double>(n_in) / static_cast<double>(n_out);
      const int64_t from = std::min(n_in - 1, static_cast<int64_t>(static_cast<double>(i) * ratio));
      out[static_cast<size_t>(i)] = bf16_to_float(in[static_cast<size_t>(from)]);
    }
  }
  return out;
}

}  // namespace moesim::cuda::ref
