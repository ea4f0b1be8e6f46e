// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/dtype.h"

namespace tb {

// Physical order of a rank-4 tensor. The logical shape is always (N, C, H, W);
// layout says how those elements lie in memory. Tensors of other ranks are
// plain row-major and their layout is NCHW by convention.
// NCHW16C is oneDNN's nChw16c: channels in blocks of 16, each block an
// (H, W, 16) run per image, so (n, c, h, w) lies at
// (((n·C/16 + c/16)·H + h)·W + w)·16 + c mod 16. The CPU backend's blocked
// activations (cpu_layout): its convolutions read and write them with no
// reorder. C must be a multiple of 16, and only host tensors take it (the
// CUDA backend has no kernels for it: Tensor refuses it on a device).
enum class Layout { NCHW, NHWC, NCHW16C };
inline constexpr int64_t kLayoutBlock = 16;  // NCHW16C's channels a block
const char* layout_name(Layout l);

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[64, 1, 28, 28]"
int64_t shape_numel(const Shape& s);

// Device memory source. The CPU allocator is built in; the CUDA backend
// registers its caching allocator when it starts.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;  // throws tb::OutOfMemory
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  // Memory for a tensor of `device`. An allocator serving several devices
  // (CUDA) allocates on that one, whatever device the calling thread has
  // current (parallel: dp allocates for several devices from one thread).
  virtual void* allocate_for(const Device& device, size_t bytes) {
    (void)device;
    return allocate(bytes);
  }
  // Memory given back to this allocator and kept for reuse (a caching
  // allocator's free blocks, the C heap's freed pages) goes back to the
  // system: before one large allocation replaces many freed smaller ones.
  virtual void release_free() {}
};
Allocator& allocator_for(const Device& d);  // throws tb::Error if none is registered
void register_allocator(DeviceKind kind, Allocator* allocator);

// A typed view of a block of memory: shape, dtype, layout and device.
// Copying a Tensor copies the view, never the data (like a shared pointer).
// Views into a parent block (parameters in the contiguous parameter block)
// keep the parent's storage alive.
class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu(),
                      Layout layout = Layout::NCHW);
  // Like empty, with memory from `allocator` (page-locked host memory for
  // batches, say). The allocator must outlive the tensor.
  static Tensor empty_with(Allocator& allocator, const Shape& shape, DType dtype,
                           Device device = Device::cpu(), Layout layout = Layout::NCHW);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu(),
                      Layout layout = Layout::NCHW);  // CPU only; devices use Backend::fill
  // A view of `shape` starting `element_offset` elements into `base` (contiguous).
  static Tensor view_of(const Tensor& base, int64_t element_offset, const Shape& shape,
                        Layout layout = Layout::NCHW);
  // Bytes [byte_offset, byte_offset + numel(shape) * size(dtype)) of `base`
  // as a tensor with holders of its own: it keeps base's block alive, but
  // its views count in its holders() and not in base's (a pool's region of
  // one block, TransientBuffers). byte_offset must suit dtype's alignment.
  static Tensor region_of(const Tensor& base, int64_t byte_offset, const Shape& shape, DType dtype);
  // A non-owning view of caller memory (the caller keeps it alive).
  static Tensor wrap(void* data, const Shape& shape, DType dtype, Device device = Device::cpu(),
                     Layout layout = Layout::NCHW);

  bool defined() const { return data_ != nullptr; }
  void* data() const { return data_; }
  template <typename T> T* data_as() const { return static_cast<T*>(data_); }

  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(i < 0 ? i + rank() : i); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  Layout layout() const { return layout_; }

  // Rank-4 accessors (logical dims, whatever the layout).
  int64_t n() const { return dim(0); }
  int64_t c() const { return dim(1); }
  int64_t h() const { return dim(2); }
  int64_t w() const { return dim(3); }

  // Same data, new logical shape (contiguous, element count unchanged). A
  // blocked (NCHW16C) tensor keeps its shape, or has H = W = 1, where its
  // memory is NCHW's (a flatten after global pooling); else it throws.
  Tensor reshaped(const Shape& shape) const;
  // Rows [begin, end) of the leading dimension.
  Tensor rows(int64_t begin, int64_t end) const;

  std::string describe() const;  // "f32[64, 1, 28, 28] NCHW cpu"
  // How many Tensors (views included) share this one's block; 0 for wrapped
  // memory. What a pool reads to tell a block nobody else holds.
  long holders() const { return storage_.use_count(); }

 private:
  std::shared_ptr<void> storage_;  // owner of the block (null for wrapped memory)
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_{};
  Layout layout_ = Layout::NCHW;
};

// Element offset of logical (n, c, h, w) in a rank-4 tensor of the given layout.
inline int64_t offset4(Layout l, int64_t C, int64_t H, int64_t W, int64_t n, int64_t c, int64_t h,
                       int64_t w) {
  switch (l) {
    case Layout::NHWC: return ((n * H + h) * W + w) * C + c;
    case Layout::NCHW16C:
      return (((n * (C / kLayoutBlock) + c / kLayoutBlock) * H + h) * W + w) * kLayoutBlock +
             c % kLayoutBlock;
    case Layout::NCHW: break;
  }
  return ((n * C + c) * H + h) * W + w;
}

// Throws tb::Error naming `what` unless t has the expected shape/dtype.
void expect_shape(const Tensor& t, const Shape& shape, const char* what);
void expect_dtype(const Tensor& t, DType dtype, const char* what);

}  // namespace tb
