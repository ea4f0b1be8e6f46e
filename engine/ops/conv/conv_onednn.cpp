// SPDX-License-Identifier: GPL-3.0-or-later
// oneDNN's convolutions for the CPU backend (contract: conv_onednn.h). Built
// only when oneDNN was found (engine/CMakeLists.txt).
#include "engine/ops/conv/conv_onednn.h"

#include <omp.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "engine/core/error.h"

namespace tb::conv::onednn {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// oneDNN reads omp_get_max_threads() when it makes a primitive (its kernels'
// work split) and when it runs one: both happen inside this guard.
class OmpThreads {
 public:
  explicit OmpThreads(int n) : prev_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(prev_); }

 private:
  int prev_;
};

Tag act_tag(Layout l) { return l == Layout::NHWC ? Tag::nhwc : Tag::nchw; }
Tag filt_tag(Layout l) { return l == Layout::NHWC ? Tag::ohwi : Tag::oihw; }

// One operand of a primitive: the caller's memory (`user`) and the layout the
// primitive chose (`inner`); when they differ, a scratch buffer of the inner
// layout and the reorder between the two.
struct Operand {
  memory::desc user, inner;
  memory scratch;
  dnnl::reorder reorder;  // user -> inner for inputs, inner -> user for outputs

  void init(const dnnl::engine& eng, const memory::desc& u, const memory::desc& in, bool input) {
    user = u;
    inner = in;
    if (user == inner) return;
    scratch = memory(inner, eng);
    reorder = input ? dnnl::reorder(dnnl::reorder::primitive_desc(eng, user, eng, inner))
                    : dnnl::reorder(dnnl::reorder::primitive_desc(eng, inner, eng, user));
  }
  // The memory the primitive reads: the caller's, or its reordered copy.
  memory input(const dnnl::engine& eng, dnnl::stream& s, const float* p) {
    memory m(user, eng, const_cast<float*>(p));
    if (user == inner) return m;
    reorder.execute(s, {{DNNL_ARG_FROM, m}, {DNNL_ARG_TO, scratch}});
    return scratch;
  }
  // The memory the primitive writes; finish() moves it to p when it is scratch.
  memory output(const dnnl::engine& eng, float* p) {
    return user == inner ? memory(user, eng, p) : scratch;
  }
  void finish(const dnnl::engine& eng, dnnl::stream& s, float* p) {
    if (user == inner) return;
    memory m(user, eng, p);
    reorder.execute(s, {{DNNL_ARG_FROM, scratch}, {DNNL_ARG_TO, m}});
  }
};

void add_into(float* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

bool has_direct_kernels() {
  const auto avx2 = static_cast<unsigned>(dnnl::cpu_isa::avx2);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & avx2) == avx2;
}

struct Convolutions::State {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};

  // The forward of one (shape, layouts, form, bias, threads).
  struct Forward {
    dnnl::convolution_forward prim;
    Operand x, w, y;
    memory::desc b;
    std::string impl;
  };
  // The backward of one (shape, layouts, form, which outputs, threads).
  struct Backward {
    dnnl::convolution_backward_data data;        // when dx is wanted
    dnnl::convolution_backward_weights weights;  // when dw or db is wanted
    Operand dy_data, w, dx;                       // of `data`
    Operand x, dy_weights, dw;                    // of `weights`
    memory::desc db;
    std::vector<float> dw_part, db_part;  // accumulate, and dw when only db is wanted
    std::string impl;
  };
  std::mutex mutex;  // the maps; a backend's convolutions run one at a time
  std::map<std::string, Forward> forwards;
  std::map<std::string, Backward> backwards;

  struct Descs {
    memory::desc x, w, b, y, x_any, w_any, y_any;
    memory::dims stride, pad_l, pad_r;
  };
  static Descs descs(const ConvGeometry& g, Layouts l, Activations a, bool bias) {
    const memory::dims xd{g.N, g.C_in, g.H, g.W}, wd{g.C_out, g.C_in, g.KH, g.KW},
        yd{g.N, g.C_out, g.H_out, g.W_out};
    const auto f32 = memory::data_type::f32;
    const Tag act_inner = a == Activations::Blocked ? Tag::any : act_tag(l.act);
    // Right padding as oneDNN counts it: what the last window reads past the edge.
    const int64_t pr_h = (g.H_out - 1) * g.stride + g.KH - g.H - g.pad;
    const int64_t pr_w = (g.W_out - 1) * g.stride + g.KW - g.W - g.pad;
    return {memory::desc(xd, f32, act_tag(l.act)),
            memory::desc(wd, f32, filt_tag(l.filt)),
            bias ? memory::desc({g.C_out}, f32, Tag::x) : memory::desc(),
            memory::desc(yd, f32, act_tag(l.act)),
            memory::desc(xd, f32, act_inner),
            memory::desc(wd, f32, Tag::any),
            memory::desc(yd, f32, act_inner),
            {g.stride, g.stride},
            {g.pad, g.pad},
            {pr_h, pr_w}};
  }
  dnnl::convolution_forward::primitive_desc forward_pd(const Descs& d) {
    return dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                        dnnl::algorithm::convolution_direct, d.x_any, d.w_any,
                                        d.b, d.y_any, d.stride, d.pad_l, d.pad_r),
        eng);
  }
};

namespace {

std::string key_of(const char* op, const ConvGeometry& g, Layouts l, Activations a, int threads,
                   unsigned outputs) {
  char k[200];
  std::snprintf(k, sizeof k, "%s %lld %lld %lld %lld %lld %lld %lld %lld %d%d%d %d %u", op,
                (long long)g.N, (long long)g.C_in, (long long)g.H, (long long)g.W,
                (long long)g.C_out, (long long)g.KH, (long long)g.stride, (long long)g.pad,
                int(l.act), int(l.filt), int(a), threads, outputs);
  return k;
}

[[noreturn]] void fail(const char* op, const ConvGeometry& g, const dnnl::error& e) {
  TB_FAIL(op, ": oneDNN failed for N=", g.N, " C_in=", g.C_in, " ", g.H, "x", g.W,
          " C_out=", g.C_out, " kernel ", g.KH, " stride ", g.stride, " pad ", g.pad, ": ",
          e.what());
}

}  // namespace

Convolutions::Convolutions() : s_(std::make_unique<State>()) {}
Convolutions::~Convolutions() = default;

const std::string& Convolutions::forward(const ConvGeometry& g, Layouts l, Activations a,
                                         int threads, const float* x, const float* w,
                                         const float* b, float* y) {
  const char* op = "conv2d_forward";
  std::lock_guard lock(s_->mutex);
  OmpThreads omp(threads);
  try {
    auto& eng = s_->eng;
    const std::string key = key_of("fwd", g, l, a, threads, b != nullptr);
    auto it = s_->forwards.find(key);
    if (it == s_->forwards.end()) {
      const State::Descs d = State::descs(g, l, a, b != nullptr);
      const auto pd = s_->forward_pd(d);
      State::Forward f;
      f.prim = dnnl::convolution_forward(pd);
      f.x.init(eng, d.x, pd.src_desc(), true);
      f.w.init(eng, d.w, pd.weights_desc(), true);
      f.y.init(eng, d.y, pd.dst_desc(), false);
      f.b = d.b;
      f.impl = pd.impl_info_str();
      it = s_->forwards.emplace(key, std::move(f)).first;
    }
    State::Forward& f = it->second;
    auto& s = s_->stream;
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, f.x.input(eng, s, x)},
                                         {DNNL_ARG_WEIGHTS, f.w.input(eng, s, w)},
                                         {DNNL_ARG_DST, f.y.output(eng, y)}};
    if (b) args.emplace(DNNL_ARG_BIAS, memory(f.b, eng, const_cast<float*>(b)));
    f.prim.execute(s, args);
    f.y.finish(eng, s, y);
    s.wait();
    return f.impl;
  } catch (const dnnl::error& e) {
    fail(op, g, e);
  }
}

const std::string& Convolutions::backward(const ConvGeometry& g, Layouts l, Activations a,
                                          int threads, const float* x, const float* w,
                                          const float* dy, float* dx, float* dw, float* db,
                                          bool accumulate) {
  const char* op = "conv2d_backward";
  std::lock_guard lock(s_->mutex);
  OmpThreads omp(threads);
  try {
    auto& eng = s_->eng;
    const bool want_w = dw || db;
    const unsigned outputs = (dx ? 1u : 0u) | (dw ? 2u : 0u) | (db ? 4u : 0u);
    const std::string key = key_of("bwd", g, l, a, threads, outputs);
    auto it = s_->backwards.find(key);
    if (it == s_->backwards.end()) {
      const State::Descs d = State::descs(g, l, a, db != nullptr);
      // The forward's primitive descriptor is the backward's hint (its layouts).
      const auto fwd = s_->forward_pd(d);
      State::Backward bw;
      std::string impl;
      if (dx) {
        const dnnl::convolution_backward_data::primitive_desc pd(
            dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, d.x_any,
                                                  d.w_any, d.y_any, d.stride, d.pad_l, d.pad_r),
            eng, fwd);
        bw.data = dnnl::convolution_backward_data(pd);
        bw.dy_data.init(eng, d.y, pd.diff_dst_desc(), true);
        bw.w.init(eng, d.w, pd.weights_desc(), true);
        bw.dx.init(eng, d.x, pd.diff_src_desc(), false);
        impl = std::string("data ") + pd.impl_info_str();
      }
      if (want_w) {
        const dnnl::convolution_backward_weights::primitive_desc pd(
            dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct,
                                                     d.x_any, d.w_any, d.b, d.y_any, d.stride,
                                                     d.pad_l, d.pad_r),
            eng, fwd);
        bw.weights = dnnl::convolution_backward_weights(pd);
        bw.x.init(eng, d.x, pd.src_desc(), true);
        bw.dy_weights.init(eng, d.y, pd.diff_dst_desc(), true);
        bw.dw.init(eng, d.w, pd.diff_weights_desc(), false);
        bw.db = d.b;
        impl += std::string(impl.empty() ? "" : ", ") + "weights " + pd.impl_info_str();
      }
      bw.impl = impl;
      it = s_->backwards.emplace(key, std::move(bw)).first;
    }
    State::Backward& bw = it->second;
    auto& s = s_->stream;
    if (dx) {
      bw.data.execute(s, {{DNNL_ARG_DIFF_DST, bw.dy_data.input(eng, s, dy)},
                          {DNNL_ARG_WEIGHTS, bw.w.input(eng, s, w)},
                          {DNNL_ARG_DIFF_SRC, bw.dx.output(eng, dx)}});
      bw.dx.finish(eng, s, dx);
    }
    if (want_w) {
      // dw and db land in the caller's tensors, or in parts to add (accumulate)
      // or to drop (dw not wanted).
      const size_t nw = size_t(g.C_out * g.C_in * g.KH * g.KW), nb = size_t(g.C_out);
      float* dw_out = dw && !accumulate ? dw : (bw.dw_part.resize(nw), bw.dw_part.data());
      float* db_out = db && accumulate ? (bw.db_part.resize(nb), bw.db_part.data()) : db;
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, bw.x.input(eng, s, x)},
                                           {DNNL_ARG_DIFF_DST, bw.dy_weights.input(eng, s, dy)},
                                           {DNNL_ARG_DIFF_WEIGHTS, bw.dw.output(eng, dw_out)}};
      if (db) args.emplace(DNNL_ARG_DIFF_BIAS, memory(bw.db, eng, db_out));
      bw.weights.execute(s, args);
      bw.dw.finish(eng, s, dw_out);
      s.wait();
      if (dw && accumulate) add_into(dw, dw_out, nw);
      if (db && accumulate) add_into(db, db_out, nb);
    }
    s.wait();
    return bw.impl;
  } catch (const dnnl::error& e) {
    fail(op, g, e);
  }
}

}  // namespace tb::conv::onednn
