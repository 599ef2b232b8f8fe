#ifndef NEREID_OPS_CUDA_CUDNN_DESCRIPTORS_H_
#define NEREID_OPS_CUDA_CUDNN_DESCRIPTORS_H_

// What the cuDNN kernels (conv_gpu_kernels.cc, pool_gpu_kernels.cc) share:
// descriptors destroyed with their owner, 4-D float32 tensor descriptors,
// and the checks cuDNN's int-sized legacy descriptors need.

#include <cudnn.h>

#include <array>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "graph/ir.h"
#include "ops/cuda/gpu_launch.h"

namespace nereid::cuda {

// A cuDNN descriptor destroyed with its owner.
template <typename Desc, cudnnStatus_t (*Destroy)(Desc)>
class Owned {
 public:
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (desc_ != nullptr) Destroy(desc_);
  }
  Desc get() const { return desc_; }
  Desc* out() { return &desc_; }

 private:
  Desc desc_ = nullptr;
};
using TensorDesc = Owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDesc = Owned<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvDesc = Owned<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;
using PoolDesc = Owned<cudnnPoolingDescriptor_t, cudnnDestroyPoolingDescriptor>;

// cuDNN's legacy descriptors take int.
inline bool FitsInt(std::initializer_list<int64_t> values) {
  for (int64_t v : values) {
    if (v < 0 || v > INT_MAX) return false;
  }
  return true;
}

// A float32 4-D tensor descriptor of `dims` laid out with `strides` (in
// elements).
inline absl::Status MakeTensorDesc(TensorDesc* desc, const std::array<int64_t, 4>& dims,
                            const std::array<int64_t, 4>& strides, const std::string& prefix) {
  RETURN_IF_ERROR(CudnnStatus(cudnnCreateTensorDescriptor(desc->out()),
                                    absl::StrCat(prefix, "cudnnCreateTensorDescriptor")));
  return CudnnStatus(
      cudnnSetTensor4dDescriptorEx(desc->get(), CUDNN_DATA_FLOAT, static_cast<int>(dims[0]),
                                   static_cast<int>(dims[1]), static_cast<int>(dims[2]), static_cast<int>(dims[3]),
                                   static_cast<int>(strides[0]), static_cast<int>(strides[1]),
                                   static_cast<int>(strides[2]), static_cast<int>(strides[3])),
      absl::StrCat(prefix, "cudnnSetTensor4dDescriptorEx [", absl::StrJoin(dims, ","), "]"));
}

// Dense NCHW strides of `dims`.
inline std::array<int64_t, 4> DenseStrides(const std::array<int64_t, 4>& dims) {
  return {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
}

}  // namespace nereid::cuda

#endif  // NEREID_OPS_CUDA_CUDNN_DESCRIPTORS_H_
