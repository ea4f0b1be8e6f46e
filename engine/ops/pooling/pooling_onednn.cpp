// SPDX-License-Identifier: GPL-3.0-or-later
// oneDNN's average pooling for the CPU backend (contract: pooling_onednn.h).
// Built only when oneDNN was found (engine/CMakeLists.txt).
#include "engine/ops/pooling/pooling_onednn.h"

#include <cstdio>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>

#include "engine/core/error.h"
#include "engine/ops/onednn_threads.h"

namespace tb::pooling::onednn {

using dnnl::memory;

struct AvgPools::State {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};

  struct Pool {
    dnnl::pooling_forward forward;
    dnnl::pooling_backward backward;
    memory::desc x, y;
    Implementations impl;
  };
  std::mutex mutex;  // the map; a backend's pooling calls run one at a time
  std::map<std::string, Pool> pools;

  Pool& pool(const PoolGeometry& g, int threads) {
    char key[160];
    std::snprintf(key, sizeof key, "%lld %lld %lld %lld %lld %lld %lld %d", (long long)g.N,
                  (long long)g.C, (long long)g.H, (long long)g.W, (long long)g.kernel,
                  (long long)g.stride, (long long)g.pad, threads);
    auto it = pools.find(key);
    if (it != pools.end()) return it->second;
    Pool p;
    const auto f32 = memory::data_type::f32;
    p.x = memory::desc({g.N, g.C, g.H, g.W}, f32, memory::format_tag::nchw);
    p.y = memory::desc({g.N, g.C, g.H_out, g.W_out}, f32, memory::format_tag::nchw);
    // Right padding as oneDNN counts it: what the last window reads past the edge.
    const memory::dims k{g.kernel, g.kernel}, stride{g.stride, g.stride}, pad_l{g.pad, g.pad},
        pad_r{(g.H_out - 1) * g.stride + g.kernel - g.H - g.pad,
              (g.W_out - 1) * g.stride + g.kernel - g.W - g.pad};
    const auto alg = dnnl::algorithm::pooling_avg_include_padding;
    try {
      const dnnl::pooling_forward::primitive_desc fwd(
          {dnnl::prop_kind::forward_training, alg, p.x, p.y, stride, k, pad_l, pad_r}, eng);
      const dnnl::pooling_backward::primitive_desc bwd({alg, p.x, p.y, stride, k, pad_l, pad_r},
                                                       eng, fwd);
      p.forward = dnnl::pooling_forward(fwd);
      p.backward = dnnl::pooling_backward(bwd);
      p.impl = {fwd.impl_info_str(), bwd.impl_info_str()};
    } catch (const dnnl::error& e) {
      const std::string why = std::string("refused: ") + e.what();
      p.impl = {why, why};
    }
    return pools.emplace(key, std::move(p)).first->second;
  }

  Pool& usable(const char* op, const PoolGeometry& g, int threads) {
    Pool& p = pool(g, threads);
    TB_CHECK(p.forward, op, ": oneDNN takes no average pooling of N=", g.N, " C=", g.C, " ", g.H,
             "x", g.W, " kernel ", g.kernel, " stride ", g.stride, " pad ", g.pad, " (",
             p.impl.forward, ")");
    return p;
  }
};

AvgPools::AvgPools() : s_(std::make_unique<State>()) {}
AvgPools::~AvgPools() = default;

const AvgPools::Implementations& AvgPools::implementations(const PoolGeometry& g, int threads) {
  std::lock_guard lock(s_->mutex);
  tb::onednn::OmpThreads omp(threads);
  return s_->pool(g, threads).impl;
}

void AvgPools::forward(const PoolGeometry& g, int threads, const float* x, float* y) {
  std::lock_guard lock(s_->mutex);
  tb::onednn::OmpThreads omp(threads);
  State::Pool& p = s_->usable("avgpool2d_forward", g, threads);
  try {
    p.forward.execute(s_->stream, {{DNNL_ARG_SRC, memory(p.x, s_->eng, const_cast<float*>(x))},
                                   {DNNL_ARG_DST, memory(p.y, s_->eng, y)}});
    s_->stream.wait();
  } catch (const dnnl::error& e) {
    TB_FAIL("avgpool2d_forward: oneDNN failed: ", e.what());
  }
}

void AvgPools::backward(const PoolGeometry& g, int threads, const float* dy, float* dx) {
  std::lock_guard lock(s_->mutex);
  tb::onednn::OmpThreads omp(threads);
  State::Pool& p = s_->usable("avgpool2d_backward", g, threads);
  try {
    p.backward.execute(s_->stream,
                       {{DNNL_ARG_DIFF_DST, memory(p.y, s_->eng, const_cast<float*>(dy))},
                        {DNNL_ARG_DIFF_SRC, memory(p.x, s_->eng, dx)}});
    s_->stream.wait();
  } catch (const dnnl::error& e) {
    TB_FAIL("avgpool2d_backward: oneDNN failed: ", e.what());
  }
}

bool is_jit(const std::string& implementation) { return implementation.rfind("jit", 0) == 0; }

bool is_refused(const std::string& implementation) {
  return implementation.rfind("refused", 0) == 0;
}

}  // namespace tb::pooling::onednn
