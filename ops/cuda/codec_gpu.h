#ifndef NEREID_OPS_CUDA_CODEC_GPU_H_
#define NEREID_OPS_CUDA_CODEC_GPU_H_

// The GPU kernels of the codecs: the bucketed codes (compress/bucket_codes.h:
// TernGrad, 1-bit SGD and QSGD's fixed coding), QSGD's Elias coding, top-k,
// PowerSGD and GradiVeQ, through the same functions as the host codecs, so they
// write the same bits and the same averages. Plain C++ at this boundary, as
// gpu_math.h: each launcher enqueues on `stream` (a cudaStream_t) and returns a cudaError_t as an int.
//
// Encode: one thread per bucket computes its head and counts its draws; a
// scan (CUB) numbers the draws; one thread per bucket packs its values.
// DecodeAverage: one thread per value sums its decodes over the ranks, in
// rank order, and scales by 1/world, as the host's GatherCodec::Absorb.

#include <cstddef>
#include <cstdint>

#include "compress/bucket_codes.h"
#include "compress/gradiveq_steps.h"
#include "compress/qsgd_elias_buckets.h"

namespace nereid::cuda::codecs {

enum class Coder { kTernGrad, kOneBit, kQsgd };

// The device scratch Encode needs for a code of `layout` (bytes).
size_t EncodeScratchBytes(Coder coder, const codes::BucketLayout& layout);

// code <- encode(g) for one rank; `residual` (1-bit SGD's, null for the
// others) is updated in place; draw k is codes::UniformAt(seed, k).
int Encode(Coder coder, const codes::BucketLayout& layout, const float* g, float* residual, uint64_t seed,
           void* scratch, size_t scratch_bytes, float* code, void* stream);

// average <- (decode(rank 0's code) + ... + decode(rank world-1's)) * (1 /
// world), rank r's code at codes + r * stride.
int DecodeAverage(Coder coder, const codes::BucketLayout& layout, const float* codes, int64_t stride, int world,
                  float* average, void* stream);

// QSGD's Elias coding (compress/qsgd_elias_buckets.h) of `coder`'s layout.
// Encode: the code (coder.BoundFloats() floats) of g for one rank, its
// first word the floats it uses. A thread per bucket takes its norm and
// counts its draws, a scan numbers the draws, a thread per bucket makes
// its fields and counts their bits, a scan places each bucket in the
// stream, a thread per bucket writes its words (an atomic OR where two
// buckets share a word).
// DecodeAverage: rank r's code at codes + r * stride, `floats` long; a
// thread per rank walks its stream to find each bucket's first bit, then a
// thread per bucket decodes every rank's bucket in rank order and scales by
// 1/world, as the host.
size_t EliasEncodeScratchBytes(const codes::QsgdElias& coder);
size_t EliasDecodeScratchBytes(const codes::QsgdElias& coder, int world);
int EliasEncode(const codes::QsgdElias& coder, const float* g, uint64_t seed, void* scratch, size_t scratch_bytes,
                float* code, void* stream);
// out <- the first `floats` floats of `code`, those past its used ones zero
// (GatherCodec's padding to the longest rank's code).
int EliasPad(const float* code, int64_t floats, float* out, void* stream);
int EliasDecodeAverage(const codes::QsgdElias& coder, const float* codes, int64_t stride, int64_t floats, int world,
                       void* scratch, size_t scratch_bytes, float* average, void* stream);

// Top-k with DGC's momentum correction (compress/topk_codec.cc) over n
// values, k sent: v (and u, null without momentum) accumulate g, the k
// values first in codes::TopKKey's order are written as (index, value) pairs
// in index order, and zeroed in v and u. A radix sort (CUB) of the keys
// selects them.
size_t TopKScratchBytes(int64_t n, int64_t k);
int TopKEncode(int64_t n, int64_t k, float momentum, const float* g, float* u, float* v, void* scratch,
               size_t scratch_bytes, float* code, void* stream);
// average <- (decode(rank 0's pairs) + ... ) * (1 / world): each rank's
// pairs added in rank order, as the host does.
int TopKDecodeAverage(int64_t n, int64_t k, const float* codes, int64_t stride, int world, float* average,
                      void* stream);

// PowerSGD (compress/powersgd_codec.cc) on a gradient M of n rows and m
// columns at rank r, its outputs computed as compress/powersgd_steps.h's:
// round 0, mat += g, Q's zero columns take `normals` (m x r, drawn by the
// host as its codec draws them), p_out = M Q; round 0's absorb, p = in / world
// orthonormalised (one thread: the host's order); round 1, q_out = M^T P;
// round 1's absorb, q = in / world, average = P Q^T, mat -= average.
// `zero`: r bytes of scratch; `col`, `basis`: n and n * r doubles.
int PowerSgdContributeP(int64_t n, int64_t m, int64_t r, const float* g, float* mat, float* q, const float* normals,
                        unsigned char* zero, float* p_out, void* stream);
int PowerSgdAbsorbP(int64_t n, int64_t r, const float* in, int world, float* p, double* col, double* basis,
                    void* stream);
int PowerSgdContributeQ(int64_t n, int64_t m, int64_t r, const float* mat, const float* p, float* q_out, void* stream);
int PowerSgdAbsorbQ(int64_t n, int64_t m, int64_t r, const float* in, int world, const float* p, float* q, float* mat,
                    float* average, void* stream);

// GradiVeQ (compress/gradiveq_codec.cc) through compress/gradiveq_steps.h's
// functions. BasisWord: `word` <- 1 if the basis holds a value other than
// zero, else 0 (whether the step goes exact). Contribute: x = g, or with
// error feedback residual += g and x = residual; an exact step sends x (the
// residual becomes 0), a compressed one U^T x per slice, a thread per
// coefficient (the residual becomes x - U c, a thread per value).
// Absorb: an exact step's average is in / world, the covariance (halved on
// a refresh) adds the sampled slices' x x^T (a thread per entry), and where
// the step recomputes the basis one thread runs the host's Jacobi solver;
// a compressed step's average is U (in / world), a thread per value.
size_t GradiveqScratchBytes(const codes::GradiveqCode& code);
int GradiveqBasisWord(const codes::GradiveqCode& code, const float* basis, uint32_t* word, void* stream);
int GradiveqContribute(const codes::GradiveqCode& code, codes::GradiveqStep kind, const float* g, const float* basis,
                       float* residual, float* out, void* stream);
int GradiveqAbsorb(const codes::GradiveqCode& code, codes::GradiveqStep kind, int64_t step, const float* in, int world,
                   float* covariance, float* basis, void* scratch, size_t scratch_bytes, float* average,
                   void* stream);

// A low-rank push's segment (compress/low_rank_push.h), n rows by m
// columns at rank r, against its edge's `reference` and warm start `q`
// (m x r), as LowRankPush::Encode: d = x - reference; q's zero columns take
// `normals` (LowRankPush::SeedDraws); p_out = D q, orthonormalised;
// q_out = D^T p_out, copied to q; reference += p_out q_out^T. Scratch: `d`
// (n * m floats), `zero` (r bytes), `col` and `basis` (n and n * r
// doubles).
int LowRankPushEncode(int64_t n, int64_t m, int64_t r, const float* x, float* reference, float* q,
                      const float* normals, float* d, unsigned char* zero, double* col, double* basis, float* p_out,
                      float* q_out, void* stream);
// reference += P Q^T: the receiver's decode of a segment.
int LowRankPushAddProduct(int64_t n, int64_t m, int64_t r, const float* p, const float* q, float* reference,
                          void* stream);
// y = x + consensus * (received - sent), the push's step.
int LowRankPushMix(int64_t count, const float* x, const float* received, const float* sent, float consensus,
                   float* y, void* stream);

}  // namespace nereid::cuda::codecs

#endif  // NEREID_OPS_CUDA_CODEC_GPU_H_
