// The one PyTorch binding for every rung. Compiled once per rung with
// -DLAB_LAUNCHER=lab_forward_<id>; exposes forward(q, k, v, o, causal, softmax_scale). A tuning build
// (-DLAB_TUNING, `lab tune`) also exposes configs(head_dim, dtype) and forward_config(..., config).
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

static LabAttentionArgs make_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& o,
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
  return LabAttentionArgs{q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                          (int)q.size(0), (int)q.size(1), (int)q.size(2), (int)k.size(2),
                          (int)q.size(3), causal ? 1 : 0, (float)softmax_scale,
                          to_lab_dtype(q.scalar_type())};
}

void forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& o,
             bool causal, double softmax_scale) {
  c10::cuda::CUDAGuard guard(q.device());
  const LabAttentionArgs args = make_args(q, k, v, o, causal, softmax_scale);
  const char* err = LAB_LAUNCHER(&args, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == nullptr, err ? err : "");
}

#ifdef LAB_TUNING
// The tuning contract of common.cuh: candidate configurations listed and launched by index.
LAB_EXPORT const char* LAB_TUNE_CONFIGS(int head_dim, LabDtype dtype);
LAB_EXPORT const char* LAB_TUNE_LAUNCHER(const LabAttentionArgs* args, cudaStream_t stream, int config);

static LabDtype dtype_from_name(const std::string& name) {
  if (name == "float32") return LAB_FLOAT32;
  if (name == "float16") return LAB_FLOAT16;
  if (name == "bfloat16") return LAB_BFLOAT16;
  TORCH_CHECK(false, "unsupported dtype ", name, "; use float32, float16 or bfloat16");
  return LAB_FLOAT32;  // not reached: TORCH_CHECK(false, ...) throws
}

std::vector<std::string> configs(int64_t head_dim, const std::string& dtype) {
  std::vector<std::string> out;
  const char* names = LAB_TUNE_CONFIGS((int)head_dim, dtype_from_name(dtype));
  std::string all = names ? names : "";
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find(';', start);
    if (end == std::string::npos) end = all.size();
    if (end > start) out.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

void forward_config(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& o,
                    bool causal, double softmax_scale, int64_t config) {
  c10::cuda::CUDAGuard guard(q.device());
  const LabAttentionArgs args = make_args(q, k, v, o, causal, softmax_scale);
  const char* err = LAB_TUNE_LAUNCHER(&args, c10::cuda::getCurrentCUDAStream().stream(), (int)config);
  TORCH_CHECK(err == nullptr, err ? err : "");
}
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "attention forward into o", py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("o"), py::arg("causal"), py::arg("softmax_scale"));
#ifdef LAB_TUNING
  m.def("configs", &configs, "the labels of the tuning candidates for a head_dim and dtype, by index",
        py::arg("head_dim"), py::arg("dtype"));
  m.def("forward_config", &forward_config, "attention forward with tuning candidate `config`", py::arg("q"),
        py::arg("k"), py::arg("v"), py::arg("o"), py::arg("causal"), py::arg("softmax_scale"), py::arg("config"));
#endif
}
