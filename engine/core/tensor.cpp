// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/core/tensor.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <sstream>

#include "engine/core/error.h"

namespace tb {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::U8: return "u8";
    case DType::I32: return "i32";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::U8, DType::I32})
    if (name == dtype_name(t)) return t;
  TB_FAIL("unknown dtype '", name, "' (expected f32, f64, f16, bf16, u8 or i32)");
}

std::string Device::str() const {
  return kind == DeviceKind::CPU ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    const std::string idx = s.substr(5);
    char* end = nullptr;
    long i = std::strtol(idx.c_str(), &end, 10);
    if (!idx.empty() && end && *end == '\0' && i >= 0 && i < 1024) return Device::cuda(int(i));
  }
  TB_FAIL("invalid device '", s, "' (expected auto, cpu, cuda or cuda:N)");
}

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::NHWC: return "NHWC";
    case Layout::NCHW16C: return "nChw16c";
    case Layout::NCHW: break;
  }
  return "NCHW";
}

namespace {

// NCHW16C: rank 4, whole channel blocks, host memory (tensor.h).
void check_layout(const Shape& shape, const Device& device, Layout layout) {
  if (layout != Layout::NCHW16C) return;
  TB_CHECK(shape.size() == 4 && shape[1] % kLayoutBlock == 0, "layout nChw16c needs a rank-4 "
           "shape with channels a multiple of ", kLayoutBlock, ", got ", shape_str(shape));
  TB_CHECK(device.is_cpu(), "layout nChw16c is the cpu backend's alone; ", shape_str(shape),
           " asked for on ", device.str());
}

}  // namespace

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

namespace {

class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() {
#ifdef __GLIBC__
    // glibc maps blocks from 128 KiB up on their own pages and unmaps them
    // when freed, but after the first such free it raises that threshold to
    // the block's size (up to 32 MiB) and keeps later ones in its heap, where
    // freed memory stays resident and fragments: a model's first pass, whose
    // activations are blocks of their own until the pool makes its one
    // block, left resnet18-cifar b64 at 789 MiB peak RSS against 678 with
    // the threshold fixed (bench/NOTES.md, attempt 6), at the same speed.
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
  }
  void* allocate(size_t bytes) override {
    // 64-byte alignment suits AVX-512 loads and cache lines.
#if defined(__SANITIZE_ADDRESS__)
    // The exact size, so that AddressSanitizer sees an access past a
    // tensor's end (the CPU loops', and the CUDA kernels' on the emulator)
    // rather than the rounding's slack.
    void* p = nullptr;
    if (posix_memalign(&p, 64, std::max<size_t>(bytes, 1)) != 0) p = nullptr;
#else
    size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
#endif
    if (!p)
      throw OutOfMemory(detail::concat("out of host memory allocating ", bytes, " bytes"), bytes);
    return p;
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
  // glibc keeps freed blocks below its (self-raising) mmap threshold in the
  // heap, resident; malloc_trim hands their pages back.
  void release_free() override {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
  }
};

CpuAllocator g_cpu_allocator;
std::array<Allocator*, 2> g_allocators = {&g_cpu_allocator, nullptr};
std::mutex g_allocators_mutex;

}  // namespace

Allocator& allocator_for(const Device& d) {
  std::lock_guard lock(g_allocators_mutex);
  Allocator* a = g_allocators[static_cast<size_t>(d.kind)];
  TB_CHECK(a, "no allocator registered for device ", d.str(),
           " (this build or machine has no backend for it)");
  return *a;
}

void register_allocator(DeviceKind kind, Allocator* allocator) {
  std::lock_guard lock(g_allocators_mutex);
  g_allocators[static_cast<size_t>(kind)] = allocator;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, Layout layout) {
  return empty_with(allocator_for(device), shape, dtype, device, layout);
}

Tensor Tensor::empty_with(Allocator& allocator, const Shape& shape, DType dtype, Device device,
                          Layout layout) {
  for (int64_t d : shape) TB_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  check_layout(shape, device, layout);
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.layout_ = layout;
  const size_t bytes = t.nbytes();
  Allocator* a = &allocator;
  void* p = a->allocate_for(device, bytes);
  t.storage_ = std::shared_ptr<void>(p, [a, bytes](void* q) { a->deallocate(q, bytes); });
  t.data_ = p;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device, Layout layout) {
  TB_CHECK(device.is_cpu(), "Tensor::zeros is host-only; use Backend::fill on ", device.str());
  Tensor t = empty(shape, dtype, device, layout);
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::view_of(const Tensor& base, int64_t element_offset, const Shape& shape,
                       Layout layout) {
  TB_CHECK(base.defined(), "view of an undefined tensor");
  TB_CHECK(element_offset >= 0 && element_offset + shape_numel(shape) <= base.numel(),
           "view ", shape_str(shape), " at offset ", element_offset, " exceeds ",
           base.describe());
  check_layout(shape, base.device_, layout);
  Tensor t = base;
  t.data_ = static_cast<char*>(base.data_) + element_offset * dtype_size(base.dtype_);
  t.shape_ = shape;
  t.layout_ = layout;
  return t;
}

Tensor Tensor::region_of(const Tensor& base, int64_t byte_offset, const Shape& shape,
                         DType dtype) {
  TB_CHECK(base.defined(), "region of an undefined tensor");
  const int64_t bytes = shape_numel(shape) * int64_t(dtype_size(dtype));
  TB_CHECK(byte_offset >= 0 && byte_offset % int64_t(dtype_size(dtype)) == 0 &&
               byte_offset + bytes <= int64_t(base.nbytes()),
           "region ", dtype_name(dtype), shape_str(shape), " at byte ", byte_offset,
           " does not fit in ", base.describe());
  Tensor t;
  t.data_ = static_cast<char*>(base.data_) + byte_offset;
  // An owner of its own whose deleter holds base's: the region's holders are its views.
  t.storage_ = std::shared_ptr<void>(t.data_, [keep = base.storage_](void*) {});
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = base.device_;
  return t;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, Device device, Layout layout) {
  check_layout(shape, device, layout);
  Tensor t;
  t.data_ = data;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.layout_ = layout;
  return t;
}

Tensor Tensor::reshaped(const Shape& shape) const {
  TB_CHECK(shape_numel(shape) == numel(), "cannot reshape ", describe(), " to ",
           shape_str(shape));
  Tensor t = *this;
  if (layout_ == Layout::NCHW16C && shape != shape_) {
    TB_CHECK(h() * w() == 1, "cannot reshape ", describe(), " to ", shape_str(shape),
             ": its memory is not NCHW's (convert it with Backend::copy first)");
    t.layout_ = Layout::NCHW;
  }
  t.shape_ = shape;
  if (shape.size() != 4) t.layout_ = Layout::NCHW;
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  TB_CHECK(rank() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "rows [", begin, ", ",
           end, ") out of range for ", describe());
  const int64_t row = numel() / std::max<int64_t>(shape_[0], 1);
  Shape s = shape_;
  s[0] = end - begin;
  return view_of(*this, begin * row, s, layout_);
}

std::string Tensor::describe() const {
  std::ostringstream os;
  os << dtype_name(dtype_) << shape_str(shape_);
  if (rank() == 4) os << ' ' << layout_name(layout_);
  os << ' ' << device_.str();
  return os.str();
}

void expect_shape(const Tensor& t, const Shape& shape, const char* what) {
  TB_CHECK(t.shape() == shape, what, ": expected shape ", shape_str(shape), ", got ",
           t.describe());
}

void expect_dtype(const Tensor& t, DType dtype, const char* what) {
  TB_CHECK(t.dtype() == dtype, what, ": expected dtype ", dtype_name(dtype), ", got ",
           t.describe());
}

}  // namespace tb
