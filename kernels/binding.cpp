// The one PyTorch binding for every rung. Compiled once per rung with
// -DLAB_LAUNCHER=lab_forward_<id>; exposes forward(q, k, v, o, causal, softmax_scale, lse=None). A tuning
// build (-DLAB_TUNING, `lab tune`) also exposes configs(head_dim, dtype) and forward_config(..., config, lse=None).
// A rung with a backward (-DLAB_BACKWARD_LAUNCHER=lab_backward_<id>, common.cuh's backward contract)
// also exposes backward(q, k, v, o, dout, lse, dq, dk, dv, causal, softmax_scale, deterministic=False), which allocates the
// rung's workspace from torch's allocator on the current stream. A forward that exports lab_forward_<id>_workspace
// (common.cuh's forward workspace contract; -DLAB_FORWARD_WORKSPACE names it) gets its scratch the same way.
// The output is passed in (not allocated here) so the correctness gate can poison it first.
// A rung that declares `gqa = true` is compiled with -DLAB_GQA: its K and V (dK and dV) may have
// heads_kv heads, a divisor of Q's (common.cuh's GQA contract); without it they must have Q's.
// A rung whose forward writes the row log-sum-exp is compiled with -DLAB_WRITES_LSE (its block says
// backward = true, whose contract includes it, or writes_lse = true for a forward-only rung): its
// forward takes lse; every other rung's refuses one, so a statistic never written is never read.
// A rung that declares `deterministic = true` is compiled with -DLAB_DETERMINISTIC: its backward
// takes deterministic=True (common.cuh's deterministic contract); every other rung's refuses it.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include <map>
#include <mutex>

#include "common.cuh"

#ifndef LAB_LAUNCHER
#error "compile with -DLAB_LAUNCHER=lab_forward_<id>"
#endif

LAB_EXPORT const char* LAB_LAUNCHER(const LabAttentionArgs* args, cudaStream_t stream);

#if defined(LAB_BACKWARD_LAUNCHER) && !defined(LAB_WRITES_LSE)
#define LAB_WRITES_LSE  // the backward contract's forward writes the LSE (the lab's build says so too)
#endif

static LabDtype to_lab_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return LAB_FLOAT32;
    case at::kHalf: return LAB_FLOAT16;
    case at::kBFloat16: return LAB_BFLOAT16;
    default: TORCH_CHECK(false, "unsupported dtype ", t, "; use float32, float16 or bfloat16");
  }
}

static float* lse_ptr(const c10::optional<at::Tensor>& lse, const at::Tensor& q) {
  if (!lse.has_value() || !lse->defined()) return nullptr;
  TORCH_CHECK(lse->is_cuda() && lse->is_contiguous() && lse->scalar_type() == at::kFloat,
              "lse must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(lse->dim() == 3 && lse->size(0) == q.size(0) && lse->size(1) == q.size(1) && lse->size(2) == q.size(2),
              "lse must be [batch, heads, seqlen_q]");
  return lse->data_ptr<float>();
}

static LabAttentionArgs make_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& o,
                                  bool causal, double softmax_scale, float* lse = nullptr) {
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&q, &k, &v, &o}) {
    TORCH_CHECK(t->is_cuda(), "q, k, v and o must be CUDA tensors");
    TORCH_CHECK(t->is_contiguous(), "q, k, v and o must be contiguous (B, H, N, D)");
    TORCH_CHECK(t->dim() == 4, "q, k, v and o must be 4-D (B, H, N, D)");
    TORCH_CHECK(t->scalar_type() == q.scalar_type(), "q, k, v and o must share one dtype");
  }
  TORCH_CHECK(k.sizes() == v.sizes(), "k and v must have the same shape");
  TORCH_CHECK(o.sizes() == q.sizes(), "o must have q's shape");
  TORCH_CHECK(q.size(0) == k.size(0) && q.size(3) == k.size(3), "q and k must agree on batch and head_dim");
#ifdef LAB_GQA
  TORCH_CHECK(k.size(1) >= 1 && q.size(1) % k.size(1) == 0,
              "k and v heads must divide q's heads (GQA: each K/V head serves heads / heads_kv query heads)");
#else
  TORCH_CHECK(q.size(1) == k.size(1),
              "q and k must agree on heads: this rung does not declare gqa = true (K/V heads != Q heads)");
#endif
  return LabAttentionArgs{q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                          (int)q.size(0), (int)q.size(1), (int)q.size(2), (int)k.size(2),
                          (int)q.size(3), causal ? 1 : 0, (float)softmax_scale,
                          to_lab_dtype(q.scalar_type()), lse, (int)k.size(1), nullptr, 0, nullptr};
}

// The forward's arguments, lse included, for forward and for every tuning candidate (forward_config):
// the correctness gate poisons lse and judges what the launch wrote, candidates as the default.
static LabAttentionArgs forward_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& o,
                                     bool causal, double softmax_scale, const c10::optional<at::Tensor>& lse) {
#ifndef LAB_WRITES_LSE
  TORCH_CHECK(!lse.has_value() || !lse->defined(),
              "this rung's forward writes no lse: its lab:rung block declares neither backward = true nor writes_lse = true");
#endif
  return make_args(q, k, v, o, causal, softmax_scale, lse_ptr(lse, q));
}

// Scratch for a launch (common.cuh's workspace contracts, forward and backward): `bytes` from torch's caching
// allocator on the current stream (stream-ordered, counted in torch.cuda.max_memory_allocated, released when `scratch`
// goes out of scope after the launch), 256-byte aligned; none when bytes is 0.
template <typename Args, typename Launch>
static void launch_with_scratch(Args& args, size_t bytes, const at::Tensor& like, Launch launch) {
  at::Tensor scratch;
  if (bytes > 0) {
    scratch = at::empty({(int64_t)bytes + 256}, like.options().dtype(at::kByte));
    const uintptr_t base = reinterpret_cast<uintptr_t>(scratch.data_ptr());
    args.workspace = reinterpret_cast<void*>((base + 255) & ~uintptr_t(255));
    args.workspace_bytes = bytes;
  }
  const char* err = launch(args);
  TORCH_CHECK(err == nullptr, err ? err : "");
}

// The forward workspace contract (the lab builds with -DLAB_FORWARD_WORKSPACE=lab_forward_<id>_workspace): weak, so a
// rung that exports no such function links with it null and gets no scratch.
#ifdef LAB_FORWARD_WORKSPACE
LAB_EXPORT __attribute__((weak)) size_t LAB_FORWARD_WORKSPACE(const LabAttentionArgs* args);
static bool forward_takes_scratch() { return LAB_FORWARD_WORKSPACE != nullptr; }
static size_t forward_workspace_bytes(const LabAttentionArgs* args) {
  return LAB_FORWARD_WORKSPACE != nullptr ? LAB_FORWARD_WORKSPACE(args) : 0;
}
#else
static bool forward_takes_scratch() { return false; }
static size_t forward_workspace_bytes(const LabAttentionArgs*) { return 0; }
#endif

// common.cuh's zeroed counters: kLabCounterBytes per device and stream, zeroed once, kept for the process (a
// deliberate leak: no tensor is freed after the CUDA runtime shuts down at exit). While `stream` is being captured
// into a graph: a set of the device's capture slab, each captured call its own (the capture allocates nothing: the
// slab is made by the device's first call outside a capture), or none once the slab is spent.
constexpr int64_t kCaptureCounterSets = 4096;  // 1 MB a device; a graph captured past them falls back to a memset
struct CaptureSlab {
  at::Tensor bytes;
  int64_t handed = 0;
};
static void* stream_counters(cudaStream_t stream, const at::Tensor& like) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) return nullptr;
  static std::mutex mutex;
  static auto* kept = new std::map<std::pair<int, cudaStream_t>, at::Tensor>();
  static auto* slabs = new std::map<int, CaptureSlab>();
  std::lock_guard<std::mutex> lock(mutex);
  const int device = (int)like.get_device();
  if (capturing != cudaStreamCaptureStatusNone) {
    auto slab = slabs->find(device);
    if (slab == slabs->end() || slab->second.handed == kCaptureCounterSets) return nullptr;
    return static_cast<char*>(slab->second.bytes.data_ptr()) + kLabCounterBytes * slab->second.handed++;
  }
  if (slabs->find(device) == slabs->end()) {
    const int64_t bytes = kCaptureCounterSets * (int64_t)kLabCounterBytes;
    slabs->emplace(device, CaptureSlab{at::zeros({bytes}, like.options().dtype(at::kByte))});
  }
  const auto key = std::make_pair(device, stream);
  auto it = kept->find(key);
  if (it == kept->end()) it = kept->emplace(key, at::zeros({(int64_t)kLabCounterBytes}, like.options().dtype(at::kByte))).first;
  return it->second.data_ptr();
}

template <typename Launch>
static void forward_with_workspace(LabAttentionArgs& args, const at::Tensor& like, Launch launch) {
  // The counters go to a rung that takes scratch (it exports the workspace function) and to no other, so no other
  // rung's first call on a stream zeroes them.
  if (forward_takes_scratch()) args.counters = stream_counters(c10::cuda::getCurrentCUDAStream().stream(), like);
  launch_with_scratch(args, forward_workspace_bytes(&args), like, launch);
}

void forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& o,
             bool causal, double softmax_scale, const c10::optional<at::Tensor>& lse) {
  c10::cuda::CUDAGuard guard(q.device());
  LabAttentionArgs args = forward_args(q, k, v, o, causal, softmax_scale, lse);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  forward_with_workspace(args, q, [&](const LabAttentionArgs& a) { return LAB_LAUNCHER(&a, stream); });
}

#ifdef LAB_BACKWARD_LAUNCHER
// The backward contract of common.cuh.
LAB_EXPORT size_t LAB_BACKWARD_WORKSPACE(const LabBackwardArgs* args);
LAB_EXPORT const char* LAB_BACKWARD_LAUNCHER(const LabBackwardArgs* args, cudaStream_t stream);

static LabBackwardArgs make_backward_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          const at::Tensor& o, const at::Tensor& dout, const at::Tensor& lse,
                                          at::Tensor& dq, at::Tensor& dk, at::Tensor& dv, bool causal,
                                          double softmax_scale, bool deterministic = false) {
#ifndef LAB_DETERMINISTIC
  TORCH_CHECK(!deterministic,
              "this rung's backward has no deterministic mode: its lab:rung block does not declare deterministic = true");
#endif
  at::Tensor o_ = o;  // make_args checks q, k, v, o; the gradients are checked against them below
  (void)make_args(q, k, v, o_, causal, softmax_scale, lse_ptr(lse, q));
  TORCH_CHECK(lse.defined(), "backward needs the forward's lse");
  const std::pair<const at::Tensor*, const at::Tensor*> same_shape[] = {{&dout, &q}, {&dq, &q}, {&dk, &k}, {&dv, &v}};
  for (const auto& [t, like] : same_shape) {
    TORCH_CHECK(t->is_cuda() && t->is_contiguous() && t->scalar_type() == q.scalar_type(),
                "dout, dq, dk and dv must be contiguous CUDA tensors of q's dtype");
    TORCH_CHECK(t->sizes() == like->sizes(), "dout and dq must have q's shape, dk k's and dv v's");
  }
  return LabBackwardArgs{q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), dout.data_ptr(),
                         lse.data_ptr<float>(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), nullptr, 0,
                         (int)q.size(0), (int)q.size(1), (int)q.size(2), (int)k.size(2), (int)q.size(3),
                         causal ? 1 : 0, (float)softmax_scale, to_lab_dtype(q.scalar_type()), (int)k.size(1),
                         deterministic ? 1 : 0};
}

template <typename Launch>
static void with_workspace(LabBackwardArgs& args, const at::Tensor& like, Launch launch) {
  launch_with_scratch(args, LAB_BACKWARD_WORKSPACE(&args), like, launch);
}

void backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o,
              const at::Tensor& dout, const at::Tensor& lse, at::Tensor& dq, at::Tensor& dk, at::Tensor& dv,
              bool causal, double softmax_scale, bool deterministic) {
  c10::cuda::CUDAGuard guard(q.device());
  LabBackwardArgs args = make_backward_args(q, k, v, o, dout, lse, dq, dk, dv, causal, softmax_scale, deterministic);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  with_workspace(args, q, [&](const LabBackwardArgs& a) { return LAB_BACKWARD_LAUNCHER(&a, stream); });
}

#ifdef LAB_TUNING
// Weak: a rung may tune its forward only; asking for backward candidates then says so.
LAB_EXPORT __attribute__((weak)) const char* LAB_BACKWARD_TUNE_CONFIGS(int head_dim, LabDtype dtype);
LAB_EXPORT __attribute__((weak)) const char* LAB_BACKWARD_TUNE_LAUNCHER(const LabBackwardArgs* args,
                                                                        cudaStream_t stream, int config);
#endif
#endif  // LAB_BACKWARD_LAUNCHER

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

static std::vector<std::string> split_labels(const char* names) {
  std::vector<std::string> out;
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

std::vector<std::string> configs(int64_t head_dim, const std::string& dtype) {
  return split_labels(LAB_TUNE_CONFIGS((int)head_dim, dtype_from_name(dtype)));
}

void forward_config(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& o,
                    bool causal, double softmax_scale, int64_t config, const c10::optional<at::Tensor>& lse) {
  c10::cuda::CUDAGuard guard(q.device());
  LabAttentionArgs args = forward_args(q, k, v, o, causal, softmax_scale, lse);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  forward_with_workspace(args, q, [&](const LabAttentionArgs& a) { return LAB_TUNE_LAUNCHER(&a, stream, (int)config); });
}

#ifdef LAB_BACKWARD_LAUNCHER
std::vector<std::string> backward_configs(int64_t head_dim, const std::string& dtype) {
  if (LAB_BACKWARD_TUNE_CONFIGS == nullptr) return {};  // no backward tuning contract in this rung
  return split_labels(LAB_BACKWARD_TUNE_CONFIGS((int)head_dim, dtype_from_name(dtype)));
}

void backward_config(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o,
                     const at::Tensor& dout, const at::Tensor& lse, at::Tensor& dq, at::Tensor& dk, at::Tensor& dv,
                     bool causal, double softmax_scale, int64_t config) {
  c10::cuda::CUDAGuard guard(q.device());
  TORCH_CHECK(LAB_BACKWARD_TUNE_LAUNCHER != nullptr, "this rung exports no backward tuning candidates");
  LabBackwardArgs args = make_backward_args(q, k, v, o, dout, lse, dq, dk, dv, causal, softmax_scale);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  with_workspace(args, q, [&](const LabBackwardArgs& a) { return LAB_BACKWARD_TUNE_LAUNCHER(&a, stream, (int)config); });
}
#endif
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "attention forward into o", py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("o"), py::arg("causal"), py::arg("softmax_scale"), py::arg("lse") = py::none());
#ifdef LAB_BACKWARD_LAUNCHER
  m.def("backward", &backward, "attention backward: dq, dk, dv from q, k, v, o, dout and the forward's lse",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("o"), py::arg("dout"), py::arg("lse"), py::arg("dq"),
        py::arg("dk"), py::arg("dv"), py::arg("causal"), py::arg("softmax_scale"), py::arg("deterministic") = false);
#endif
#ifdef LAB_TUNING
  m.def("configs", &configs, "the labels of the tuning candidates for a head_dim and dtype, by index",
        py::arg("head_dim"), py::arg("dtype"));
  m.def("forward_config", &forward_config, "attention forward with tuning candidate `config` (lse as forward's)",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("o"), py::arg("causal"), py::arg("softmax_scale"),
        py::arg("config"), py::arg("lse") = py::none());
#ifdef LAB_BACKWARD_LAUNCHER
  m.def("backward_configs", &backward_configs, "the labels of the backward's tuning candidates",
        py::arg("head_dim"), py::arg("dtype"));
  m.def("backward_config", &backward_config, "attention backward with tuning candidate `config`", py::arg("q"),
        py::arg("k"), py::arg("v"), py::arg("o"), py::arg("dout"), py::arg("lse"), py::arg("dq"), py::arg("dk"),
        py::arg("dv"), py::arg("causal"), py::arg("softmax_scale"), py::arg("config"));
#endif
#endif
}
