// The one PyTorch binding for every rung. Compiled once per rung with
// -DLAB_LAUNCHER=lab_forward_<id>; exposes forward(q, k, v, o, causal, softmax_scale).
// The output is passed in (not allocated here) so the correctness gate can poison it first.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include "common.cuh"

#ifndef LAB_LAUNCHER
#error "compile with -DLAB_LAUNCHER=lab_forward_<id>"
#endif

LAB_EXPORT const char* LAB_LAUNCHER(const LabAttentionArgs* args, cudaStream_t stream);

static LabDtype to_lab_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return LAB_FLOAT32;
    case at::kHalf: return LAB_FLOAT16;
    case at::kBFloat16: return LAB_BFLOAT16;
    default: TORCH_CHECK(false, "unsupported dtype ", t, "; use float32, float16 or bfloat16");
  }
}

void forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& o,
             bool causal, double softmax_scale) {
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&q, &k, &v, &o}) {
    TORCH_CHECK(t->is_cuda(), "q, k, v and o must be CUDA tensors");
    TORCH_CHECK(t->is_contiguous(), "q, k, v and o must be contiguous (B, H, N, D)");
    TORCH_CHECK(t->dim() == 4, "q, k, v and o must be 4-D (B, H, N, D)");
    TORCH_CHECK(t->scalar_type() == q.scalar_type(), "q, k, v and o must share one dtype");
  }
  TORCH_CHECK(k.sizes() == v.sizes(), "k and v must have the same shape");
  TORCH_CHECK(o.sizes() == q.sizes(), "o must have q's shape");
  TORCH_CHECK(q.size(0) == k.size(0) && q.size(1) == k.size(1) && q.size(3) == k.size(3),
              "q and k must agree on batch, heads and head_dim");
  c10::cuda::CUDAGuard guard(q.device());
  LabAttentionArgs args{q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                        (int)q.size(0), (int)q.size(1), (int)q.size(2), (int)k.size(2),
                        (int)q.size(3), causal ? 1 : 0, (float)softmax_scale,
                        to_lab_dtype(q.scalar_type())};
  const char* err = LAB_LAUNCHER(&args, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == nullptr, err ? err : "");
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "attention forward into o", py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("o"), py::arg("causal"), py::arg("softmax_scale"));
}
