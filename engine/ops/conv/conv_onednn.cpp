// SPDX-License-Identifier: GPL-3.0-or-later
// oneDNN's convolutions for the CPU backend (contract: conv_onednn.h). Built
// only when oneDNN was found (engine/CMakeLists.txt).
#include "engine/ops/conv/conv_onednn.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>
#include <oneapi/dnnl/dnnl.hpp>

#include "engine/core/error.h"
#include "engine/ops/onednn_threads.h"

namespace tb::conv::onednn {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

using tb::onednn::OmpThreads;

Tag act_tag(Layout l) {
  switch (l) {
    case Layout::NHWC: return Tag::nhwc;
    case Layout::NCHW16C: return Tag::nChw16c;
    case Layout::NCHW: break;
  }
  return Tag::nchw;
}
Tag filt_tag(Layout l) { return l == Layout::NHWC ? Tag::ohwi : Tag::oihw; }

// Scratch is carved from one area (Arena) per backend: a call's pieces at
// offsets handed out in order, each aligned as oneDNN aligns its own buffers.
constexpr size_t kAlign = 64;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

class Carve {
 public:
  size_t take(size_t bytes) {
    const size_t at = end_;
    end_ += aligned(bytes);
    return at;
  }
  size_t end() const { return end_; }

 private:
  size_t end_ = 0;
};

// A primitive's scratchpad (scratchpad_mode::user: its piece of the area
// instead of a buffer oneDNN keeps per primitive).
struct Scratchpad {
  memory::desc desc;
  size_t offset = 0;

  void init(const memory::desc& d, Carve& c) {
    desc = d;
    if (desc.get_size() > 0) offset = c.take(desc.get_size());
  }
  void add_to(std::unordered_map<int, memory>& args, const dnnl::engine& eng,
              std::byte* area) const {
    if (desc.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, memory(desc, eng, area + offset));
  }
};

// One operand of a primitive: the caller's memory (`user`) and the layout the
// primitive chose (`inner`); when they differ, a piece of the area in the
// inner layout and the reorder between the two.
struct Operand {
  memory::desc user, inner;
  size_t offset = 0;
  dnnl::reorder reorder;  // user -> inner for inputs, inner -> user for outputs
  Scratchpad reorder_pad;

  void init(const dnnl::engine& eng, const dnnl::primitive_attr& attr, const memory::desc& u,
            const memory::desc& in, bool input, Carve& c) {
    user = u;
    inner = in;
    if (user == inner) return;
    offset = c.take(inner.get_size());
    const auto pd = input ? dnnl::reorder::primitive_desc(eng, user, eng, inner, attr)
                          : dnnl::reorder::primitive_desc(eng, inner, eng, user, attr);
    reorder = dnnl::reorder(pd);
    reorder_pad.init(pd.scratchpad_desc(), c);
  }
  // The memory the primitive reads: the caller's, or its reordered copy.
  memory input(const dnnl::engine& eng, dnnl::stream& s, std::byte* area, const void* p) {
    memory m(user, eng, const_cast<void*>(p));
    if (user == inner) return m;
    memory copy = scratch(eng, area);
    run_reorder(eng, s, area, m, copy);
    return copy;
  }
  // The memory the primitive writes; finish() moves it to p when it is scratch.
  memory output(const dnnl::engine& eng, std::byte* area, void* p) {
    return user == inner ? memory(user, eng, p) : scratch(eng, area);
  }
  void finish(const dnnl::engine& eng, dnnl::stream& s, std::byte* area, void* p) {
    if (user == inner) return;
    run_reorder(eng, s, area, scratch(eng, area), memory(user, eng, p));
  }
  // Whether the primitive reads a reordered copy rather than the caller's memory.
  bool reordered() const { return user != inner; }
  // The copy an earlier input() left in the area (reordered() only).
  memory copy(const dnnl::engine& eng, std::byte* area) const { return scratch(eng, area); }

 private:
  memory scratch(const dnnl::engine& eng, std::byte* area) const {
    return memory(inner, eng, area + offset);
  }
  void run_reorder(const dnnl::engine& eng, dnnl::stream& s, std::byte* area, const memory& from,
                   const memory& to) {
    std::unordered_map<int, memory> args{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    reorder_pad.add_to(args, eng, area);
    reorder.execute(s, args);
  }
};

// The scratch of every call of a backend: grown to the largest call's need,
// never per shape (the calls run one at a time, under State::mutex). Host
// memory from the CPU allocator (64-byte aligned, kAlign; an out-of-memory
// error names the bytes).
class Arena {
 public:
  std::byte* reserve(size_t bytes) {
    if (bytes > size()) {
      buffer_ = Tensor{};  // before the larger one: the two are never held at once
      buffer_ = Tensor::empty({int64_t(aligned(bytes))}, DType::U8);
    }
    return static_cast<std::byte*>(buffer_.data());
  }
  size_t size() const { return buffer_.defined() ? buffer_.nbytes() : 0; }

 private:
  Tensor buffer_;
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
  dnnl::primitive_attr attr = [] {
    dnnl::primitive_attr a;
    a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return a;
  }();

  // The forward of one (shape, layouts, form, bias, threads).
  struct Forward {
    dnnl::convolution_forward prim;
    Scratchpad pad;
    Operand x, w, y;
    memory::desc b;
    size_t need = 0;  // bytes of the area a call uses
    std::string impl;
  };
  // The backward of one (shape, layouts, form, which outputs, threads): the
  // data part runs to its end before the weights part, so both carve from the
  // area's start, dy's reordered copy first in each: where both parts want dy
  // in the same inner layout (nChw16c for both on AVX-512), the weights part
  // reads the copy the data part made instead of reordering dy again (one
  // activation-sized reorder less per backward; PyTorch's makes both).
  struct Backward {
    dnnl::convolution_backward_data data;        // when dx is wanted
    dnnl::convolution_backward_weights weights;  // when dw or db is wanted
    Scratchpad data_pad, weights_pad;
    Operand dy_data, w, dx;                       // of `data`
    Operand dy_weights, x, dw;                    // of `weights`
    bool dy_shared = false;  // dy_weights is dy_data's copy, already reordered
    memory::desc db;
    size_t data_need = 0, weights_need = 0;  // bytes; the parts (below) follow weights_need
    std::string impl;
  };
  std::mutex mutex;  // the maps and the area; a backend's convolutions run one at a time
  std::map<std::string, Forward> forwards;
  std::map<std::string, Backward> backwards;
  std::map<std::string, bool> takes;  // oneDNN's answers for Winograd and bf16, per problem
  Arena area;

  // The caller's operands (x, w in `in`; b, y (dy's too), dx, dw f32) and what the
  // primitives are asked for: x_any, w_any in `in`, y_any (the forward's dst)
  // and dx_any, dw_any f32, dy_any (the backward's diff_dst) in `in`. With f32
  // inputs the pairs coincide.
  struct Descs {
    memory::desc x, w, b, y, dx, dw, x_any, w_any, y_any, dy_any, dx_any, dw_any;
    memory::dims stride, pad_l, pad_r;
  };
  static memory::data_type data_type(DType in) {
    return in == DType::BF16 ? memory::data_type::bf16 : memory::data_type::f32;
  }
  static Descs descs(const ConvGeometry& g, Layouts l, Activations a, bool bias,
                     DType in = DType::F32) {
    const memory::dims xd{g.N, g.C_in, g.H, g.W}, wd{g.C_out, g.C_in, g.KH, g.KW},
        yd{g.N, g.C_out, g.H_out, g.W_out};
    const auto f32 = memory::data_type::f32, lp = data_type(in);
    const bool any = a == Activations::Blocked;
    // Right padding as oneDNN counts it: what the last window reads past the edge.
    const int64_t pr_h = (g.H_out - 1) * g.stride + g.KH - g.H - g.pad;
    const int64_t pr_w = (g.W_out - 1) * g.stride + g.KW - g.W - g.pad;
    const Tag x_tag = any ? Tag::any : act_tag(l.act), y_tag = any ? Tag::any : act_tag(l.out);
    return {memory::desc(xd, lp, act_tag(l.act)),
            memory::desc(wd, lp, filt_tag(l.filt)),
            bias ? memory::desc({g.C_out}, f32, Tag::x) : memory::desc(),
            memory::desc(yd, f32, act_tag(l.out)),
            memory::desc(xd, f32, act_tag(l.act)),
            memory::desc(wd, f32, filt_tag(l.filt)),
            memory::desc(xd, lp, x_tag),
            memory::desc(wd, lp, Tag::any),
            memory::desc(yd, f32, y_tag),
            memory::desc(yd, lp, y_tag),
            memory::desc(xd, f32, x_tag),
            memory::desc(wd, f32, Tag::any),
            {g.stride, g.stride},
            {g.pad, g.pad},
            {pr_h, pr_w}};
  }
  static dnnl::algorithm algorithm(Algorithm alg) {
    return alg == Algorithm::Winograd ? dnnl::algorithm::convolution_winograd
                                      : dnnl::algorithm::convolution_direct;
  }
  dnnl::convolution_forward::primitive_desc forward_pd(const Descs& d, Algorithm alg) {
    return dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm(alg),
                                        d.x_any, d.w_any, d.b, d.y_any, d.stride, d.pad_l,
                                        d.pad_r),
        attr, eng);
  }
  dnnl::convolution_backward_data::primitive_desc data_pd(
      const Descs& d, Algorithm alg, const dnnl::convolution_forward::primitive_desc& hint) {
    return dnnl::convolution_backward_data::primitive_desc(
        dnnl::convolution_backward_data::desc(algorithm(alg), d.dx_any, d.w_any, d.dy_any,
                                              d.stride, d.pad_l, d.pad_r),
        attr, eng, hint);
  }
  dnnl::convolution_backward_weights::primitive_desc weights_pd(
      const Descs& d, Algorithm alg, const dnnl::convolution_forward::primitive_desc& hint) {
    return dnnl::convolution_backward_weights::primitive_desc(
        dnnl::convolution_backward_weights::desc(algorithm(alg), d.x_any, d.dw_any, d.b,
                                                 d.dy_any, d.stride, d.pad_l, d.pad_r),
        attr, eng, hint);
  }
};

namespace {

std::string key_of(const char* op, const ConvGeometry& g, Layouts l, Activations a, Algorithm alg,
                   DType in, int threads, unsigned outputs) {
  char k[200];
  std::snprintf(k, sizeof k, "%s %lld %lld %lld %lld %lld %lld %lld %lld %d%d%d%d%d %d %d %u", op,
                (long long)g.N, (long long)g.C_in, (long long)g.H, (long long)g.W,
                (long long)g.C_out, (long long)g.KH, (long long)g.stride, (long long)g.pad,
                int(l.act), int(l.filt), int(l.out), int(a), int(alg), int(in), threads, outputs);
  return k;
}

// oneDNN's reference loops ("ref:any", or a GEMM convolution on its
// reference GEMM, "gemm:ref"), which it falls back to where it has no kernel
// (bf16 on a CPU without AVX-512): slower than widening to f32.
bool is_reference(const std::string& impl) {
  return impl.rfind("ref", 0) == 0 || impl.find(":ref") != std::string::npos;
}

[[noreturn]] void fail(const char* op, const ConvGeometry& g, const dnnl::error& e) {
  TB_FAIL(op, ": oneDNN failed for N=", g.N, " C_in=", g.C_in, " ", g.H, "x", g.W,
          " C_out=", g.C_out, " kernel ", g.KH, " stride ", g.stride, " pad ", g.pad, ": ",
          e.what());
}

}  // namespace

Convolutions::Convolutions() : s_(std::make_unique<State>()) {}
Convolutions::~Convolutions() = default;

bool Convolutions::takes(const ConvGeometry& g, Layouts l, Activations a, Algorithm alg,
                         DType in) {
  if (g.N <= 0) return false;  // oneDNN refuses empty tensors
  if (in != DType::F32 && (in != DType::BF16 || alg != Algorithm::Direct)) return false;
  if (alg == Algorithm::Direct && in == DType::F32) return true;
  // oneDNN pads other channel counts to a block and transforms the padding
  // too: 1 -> 32 (fmnist-cnn's first layer) ran 8x slower than direct.
  if (alg == Algorithm::Winograd && (g.C_in % kLayoutBlock != 0 || g.C_out % kLayoutBlock != 0))
    return false;
  std::lock_guard lock(s_->mutex);
  const std::string key = key_of("takes", g, l, a, alg, in, 0, 0);
  if (auto it = s_->takes.find(key); it != s_->takes.end()) return it->second;
  bool ok = true;
  try {
    for (bool bias : {false, true}) {
      const State::Descs d = State::descs(g, l, a, bias, in);
      const auto fwd = s_->forward_pd(d, alg);
      const auto data = s_->data_pd(d, alg, fwd);
      const auto weights = s_->weights_pd(d, alg, fwd);
      for (const char* impl : {fwd.impl_info_str(), data.impl_info_str(), weights.impl_info_str()})
        if (is_reference(impl)) ok = false;
    }
  } catch (const dnnl::error&) {  // no kernels for this problem (unimplemented)
    ok = false;
  }
  s_->takes.emplace(key, ok);
  return ok;
}

const std::string& Convolutions::forward(const ConvGeometry& g, Layouts l, Activations a,
                                         Algorithm alg, int threads, DType in, const void* x,
                                         const void* w, const float* b, float* y) {
  const char* op = "conv2d_forward";
  std::lock_guard lock(s_->mutex);
  OmpThreads omp(threads);
  try {
    auto& eng = s_->eng;
    const std::string key = key_of("fwd", g, l, a, alg, in, threads, b != nullptr);
    auto it = s_->forwards.find(key);
    if (it == s_->forwards.end()) {
      const State::Descs d = State::descs(g, l, a, b != nullptr, in);
      const auto pd = s_->forward_pd(d, alg);
      State::Forward f;
      Carve c;
      f.prim = dnnl::convolution_forward(pd);
      f.pad.init(pd.scratchpad_desc(), c);
      f.x.init(eng, s_->attr, d.x, pd.src_desc(), true, c);
      f.w.init(eng, s_->attr, d.w, pd.weights_desc(), true, c);
      f.y.init(eng, s_->attr, d.y, pd.dst_desc(), false, c);
      f.b = d.b;
      f.need = c.end();
      f.impl = pd.impl_info_str();
      it = s_->forwards.emplace(key, std::move(f)).first;
    }
    State::Forward& f = it->second;
    auto& s = s_->stream;
    std::byte* area = s_->area.reserve(f.need);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, f.x.input(eng, s, area, x)},
                                         {DNNL_ARG_WEIGHTS, f.w.input(eng, s, area, w)},
                                         {DNNL_ARG_DST, f.y.output(eng, area, y)}};
    if (b) args.emplace(DNNL_ARG_BIAS, memory(f.b, eng, const_cast<float*>(b)));
    f.pad.add_to(args, eng, area);
    f.prim.execute(s, args);
    f.y.finish(eng, s, area, y);
    s.wait();
    return f.impl;
  } catch (const dnnl::error& e) {
    fail(op, g, e);
  }
}

const std::string& Convolutions::backward(const ConvGeometry& g, Layouts l, Activations a,
                                          Algorithm alg, int threads, DType in, const void* x,
                                          const void* w, const float* dy, float* dx, float* dw,
                                          float* db, bool accumulate) {
  const char* op = "conv2d_backward";
  std::lock_guard lock(s_->mutex);
  OmpThreads omp(threads);
  try {
    auto& eng = s_->eng;
    const auto& attr = s_->attr;
    const bool want_w = dw || db;
    const unsigned outputs = (dx ? 1u : 0u) | (dw ? 2u : 0u) | (db ? 4u : 0u);
    const std::string key = key_of("bwd", g, l, a, alg, in, threads, outputs);
    auto it = s_->backwards.find(key);
    if (it == s_->backwards.end()) {
      const State::Descs d = State::descs(g, l, a, db != nullptr, in);
      // The forward's primitive descriptor is the backward's hint (its layouts).
      const auto fwd = s_->forward_pd(d, alg);
      State::Backward bw;
      std::string impl;
      if (dx) {
        const auto pd = s_->data_pd(d, alg, fwd);
        Carve c;
        bw.data = dnnl::convolution_backward_data(pd);
        bw.dy_data.init(eng, attr, d.y, pd.diff_dst_desc(), true, c);  // first: at the area's start
        bw.data_pad.init(pd.scratchpad_desc(), c);
        bw.w.init(eng, attr, d.w, pd.weights_desc(), true, c);
        bw.dx.init(eng, attr, d.dx, pd.diff_src_desc(), false, c);
        bw.data_need = c.end();
        impl = std::string("data ") + pd.impl_info_str();
      }
      if (want_w) {
        const auto pd = s_->weights_pd(d, alg, fwd);
        Carve c;
        bw.weights = dnnl::convolution_backward_weights(pd);
        bw.dy_weights.init(eng, attr, d.y, pd.diff_dst_desc(), true, c);  // first, as dy_data
        bw.weights_pad.init(pd.scratchpad_desc(), c);
        bw.x.init(eng, attr, d.x, pd.src_desc(), true, c);
        bw.dw.init(eng, attr, d.dw, pd.diff_weights_desc(), false, c);
        bw.dy_shared = dx && bw.dy_data.reordered() && bw.dy_weights.inner == bw.dy_data.inner;
        bw.db = d.b;
        bw.weights_need = c.end();
        impl += std::string(impl.empty() ? "" : ", ") + "weights " + pd.impl_info_str();
      }
      bw.impl = impl;
      it = s_->backwards.emplace(key, std::move(bw)).first;
    }
    State::Backward& bw = it->second;
    auto& s = s_->stream;
    // dw and db land in the caller's tensors, or in parts to add (accumulate)
    // or to drop (dw not wanted), carved after the weights part's scratch.
    const size_t nw = size_t(g.C_out * g.C_in * g.KH * g.KW), nb = size_t(g.C_out);
    Carve parts;
    parts.take(bw.weights_need);
    const bool dw_part = want_w && (!dw || accumulate), db_part = db && accumulate;
    const size_t dw_at = dw_part ? parts.take(nw * sizeof(float)) : 0;
    const size_t db_at = db_part ? parts.take(nb * sizeof(float)) : 0;
    std::byte* area = s_->area.reserve(std::max(bw.data_need, parts.end()));
    if (dx) {
      std::unordered_map<int, memory> args{
          {DNNL_ARG_DIFF_DST, bw.dy_data.input(eng, s, area, dy)},
          {DNNL_ARG_WEIGHTS, bw.w.input(eng, s, area, w)},
          {DNNL_ARG_DIFF_SRC, bw.dx.output(eng, area, dx)}};
      bw.data_pad.add_to(args, eng, area);
      bw.data.execute(s, args);
      bw.dx.finish(eng, s, area, dx);
      s.wait();  // before the weights part reuses the area
    }
    if (want_w) {
      float* dw_out = dw_part ? reinterpret_cast<float*>(area + dw_at) : dw;
      float* db_out = db_part ? reinterpret_cast<float*>(area + db_at) : db;
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC, bw.x.input(eng, s, area, x)},
          {DNNL_ARG_DIFF_DST, bw.dy_shared ? bw.dy_weights.copy(eng, area)
                                           : bw.dy_weights.input(eng, s, area, dy)},
          {DNNL_ARG_DIFF_WEIGHTS, bw.dw.output(eng, area, dw_out)}};
      if (db) args.emplace(DNNL_ARG_DIFF_BIAS, memory(bw.db, eng, db_out));
      bw.weights_pad.add_to(args, eng, area);
      bw.weights.execute(s, args);
      bw.dw.finish(eng, s, area, dw_out);
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

size_t Convolutions::scratch_bytes() const {
  std::lock_guard lock(s_->mutex);
  return s_->area.size();
}

}  // namespace tb::conv::onednn
