// What a GPU does with Nereid (--config=cuda; needs a GPU): the measured
// peak of cuBLAS SGEMM (FP32, and TF32 tensor cores), then lenet and vgg11
// trained on the GPU through the stream scheduler, as samples/s and as the
// step's FLOP rate against the FP32 peak. The step's rate counts the whole
// step (copies, updates, the host's dispatch), so it is a lower bound for the
// share its convolutions and matrix products reach.
//
//   gpu_bench [--steps N]      (run where models/ is: the repository or a bundle)

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/model_loader.h"
#include "ops/model_summary.h"
#include "passes/pass_manager.h"
#include "schedulers/executor.h"

namespace nereid {
namespace {

absl::Status Cuda(cudaError_t e, const char* what) {
  return e == cudaSuccess ? absl::OkStatus()
                          : absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}
absl::Status Blas(cublasStatus_t s, const char* what) {
  return s == CUBLAS_STATUS_SUCCESS ? absl::OkStatus()
                                    : absl::InternalError(absl::StrCat(what, ": ", cublasGetStatusString(s)));
}

// The median TFLOP/s of n x n x n SGEMMs in `math` mode over 10 timed runs.
absl::StatusOr<double> SgemmPeak(int n, cublasMath_t math) {
  const size_t bytes = static_cast<size_t>(n) * n * sizeof(float);
  float *a = nullptr, *b = nullptr, *c = nullptr;
  RETURN_IF_ERROR(Cuda(cudaMalloc(reinterpret_cast<void**>(&a), bytes), "cudaMalloc"));
  RETURN_IF_ERROR(Cuda(cudaMalloc(reinterpret_cast<void**>(&b), bytes), "cudaMalloc"));
  RETURN_IF_ERROR(Cuda(cudaMalloc(reinterpret_cast<void**>(&c), bytes), "cudaMalloc"));
  RETURN_IF_ERROR(Cuda(cudaMemset(a, 0, bytes), "cudaMemset"));
  RETURN_IF_ERROR(Cuda(cudaMemset(b, 0, bytes), "cudaMemset"));
  cublasHandle_t handle;
  RETURN_IF_ERROR(Blas(cublasCreate(&handle), "cublasCreate"));
  RETURN_IF_ERROR(Blas(cublasSetMathMode(handle, math), "cublasSetMathMode"));
  cudaEvent_t start, stop;
  RETURN_IF_ERROR(Cuda(cudaEventCreate(&start), "cudaEventCreate"));
  RETURN_IF_ERROR(Cuda(cudaEventCreate(&stop), "cudaEventCreate"));
  const float one = 1, zero = 0;
  std::vector<double> tflops;
  for (int run = 0; run < 12; ++run) {
    RETURN_IF_ERROR(Cuda(cudaEventRecord(start), "cudaEventRecord"));
    RETURN_IF_ERROR(Blas(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n),
                         "cublasSgemm"));
    RETURN_IF_ERROR(Cuda(cudaEventRecord(stop), "cudaEventRecord"));
    RETURN_IF_ERROR(Cuda(cudaEventSynchronize(stop), "cudaEventSynchronize"));
    float ms = 0;
    RETURN_IF_ERROR(Cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime"));
    if (run >= 2) tflops.push_back(2.0 * n * n * static_cast<double>(n) / (ms * 1e-3) / 1e12);  // 2 warm-ups
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cublasDestroy(handle);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  std::sort(tflops.begin(), tflops.end());
  return tflops[tflops.size() / 2];
}

struct StepRate {
  double samples_per_s = 0;
  double tflops = 0;
  double first_loss = 0, last_loss = 0;
};

// `model` trained on the GPU, batch `batch`: the median of `steps` timed
// steps (after 3 warm-ups), one step in flight.
absl::StatusOr<StepRate> TrainOnGpu(const std::string& model, int batch, int steps, std::vector<int64_t> image) {
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, LoadModel("models/" + model + ".pbtxt"));
  ASSIGN_OR_RETURN(auto pipeline, ParsePipeline("autodiff,sgd(lr=0.01,momentum=0.9),place(device=cuda,streams=1)"));
  RETURN_IF_ERROR(RunPipeline(*graph, pipeline).status());
  const ModelSummary summary = SummarizeModel(*graph);
  ExecutorOptions options;
  options.threads = 2;
  ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor, Executor::Create(graph.get(), options));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<int64_t> dims = {batch};
  dims.insert(dims.end(), image.begin(), image.end());
  ASSIGN_OR_RETURN(Tensor images, Tensor::Allocate(DT_FLOAT, dims));
  for (int64_t i = 0; i < images.num_elements(); ++i) images.data<float>()[i] = normal(rng);
  ASSIGN_OR_RETURN(Tensor labels, Tensor::Allocate(DT_INT32, {batch}));
  for (int i = 0; i < batch; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(rng() % 10);
  std::vector<double> seconds;
  StepRate rate;
  const int total = steps + 3;
  for (int t = 0; t < total; ++t) {
    const auto begin = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(executor->StartStep(StepInfo{0, t, t, total, 1, true}, {{"images", images}, {"labels", labels}},
                                        {"loss"}));
    ASSIGN_OR_RETURN(std::vector<Tensor> loss, executor->FinishStep(t));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (t >= 3) seconds.push_back(s);
    if (t == 0) rate.first_loss = loss[0].data<float>()[0];
    rate.last_loss = loss[0].data<float>()[0];
  }
  std::sort(seconds.begin(), seconds.end());
  const double step = seconds[seconds.size() / 2];
  rate.samples_per_s = batch / step;
  rate.tflops = static_cast<double>(summary.flops_per_sample) * batch / step / 1e12;
  return rate;
}

int Main(int argc, char** argv) {
  int steps = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--steps" && i + 1 < argc) steps = std::max(1, std::atoi(argv[++i]));
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "gpu_bench: no CUDA device\n");
    return 1;
  }
  std::printf("device: %s, %.1f GiB\n", prop.name, prop.totalGlobalMem / 1073741824.0);
  absl::StatusOr<double> fp32 = SgemmPeak(8192, CUBLAS_DEFAULT_MATH);
  absl::StatusOr<double> tf32 = SgemmPeak(8192, CUBLAS_TF32_TENSOR_OP_MATH);
  if (!fp32.ok() || !tf32.ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", std::string((fp32.ok() ? tf32 : fp32).status().message()).c_str());
    return 1;
  }
  std::printf("cuBLAS SGEMM 8192^3, median of 10: FP32 %.1f TFLOP/s, TF32 %.1f TFLOP/s\n", *fp32, *tf32);
  std::printf("%-14s %6s %12s %10s %14s %12s\n", "model", "batch", "samples/s", "TFLOP/s", "of FP32 peak",
              "loss first->last");
  struct Case {
    std::string model;
    int batch;
    std::vector<int64_t> image;
  };
  int failed = 0;
  for (const Case& c : {Case{"lenet_fashion", 256, {1, 28, 28}}, Case{"vgg11_cifar", 128, {3, 32, 32}}}) {
    absl::StatusOr<StepRate> r = TrainOnGpu(c.model, c.batch, steps, c.image);
    if (!r.ok()) {
      std::printf("%-14s failed: %s\n", c.model.c_str(), std::string(r.status().message()).c_str());
      failed = 1;
      continue;
    }
    std::printf("%-14s %6d %12.0f %10.2f %13.1f%% %8.4f->%.4f\n", c.model.c_str(), c.batch, r->samples_per_s,
                r->tflops, 100.0 * r->tflops / *fp32, r->first_loss, r->last_loss);
  }
  return failed;
}

}  // namespace
}  // namespace nereid

int main(int argc, char** argv) { return nereid::Main(argc, argv); }
