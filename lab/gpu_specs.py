"""Datasheet ceilings per GPU, for % of peak and roofline roofs. Dense (no sparsity) rates.

These are the vendor's numbers, looked up by the device name that torch/ncu report; measured
ceilings on the lab's H200 are in DEVICE.md (bf16 ~790 TFLOP/s, HBM ~4.3 TB/s). Unknown GPUs get
None and the report says so instead of inventing a peak.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Peaks:
    """THE model of a GPU's peaks: the table below, what device_info records, and the manifest's
    device.peaks section (lab.store.manifest builds that section from these fields). Which rate a
    dtype is measured against is lab.measure.rates's (peak_for, fastest_rate). The datasheets give
    bf16 the fp16 dense tensor rate on every GPU listed, so there is one 16-bit tensor rate."""
    tensor_fp16_tflops: float   # dense fp16/bf16 tensor core, fp32 accumulate
    fp32_tflops: float          # FFMA, non-tensor
    dram_tbps: float            # HBM/GDDR bandwidth, TB/s
    source: str = "datasheet"
    tf32_tensor_tflops: float | None = None   # dense TF32 tensor core; None: the GPU has none (before Ampere)

    def to_dict(self) -> dict:
        return asdict(self)


# Ordered: the first key contained in the device name wins, so specific names come first.
_PEAKS: tuple[tuple[str, Peaks], ...] = (
    ("H200", Peaks(989.4, 66.9, 4.8, tf32_tensor_tflops=494.7)),
    ("H100 PCIe", Peaks(756.0, 51.2, 2.0, tf32_tensor_tflops=378.0)),
    ("H100", Peaks(989.4, 66.9, 3.35, tf32_tensor_tflops=494.7)),          # SXM
    ("GH200", Peaks(989.4, 66.9, 4.0, tf32_tensor_tflops=494.7)),
    ("A100", Peaks(312.0, 19.5, 2.04, tf32_tensor_tflops=156.0)),
    ("L40S", Peaks(362.1, 91.6, 0.864, tf32_tensor_tflops=183.0)),
    ("L4", Peaks(121.0, 30.3, 0.3, tf32_tensor_tflops=60.0)),
    ("A10", Peaks(125.0, 31.2, 0.6, tf32_tensor_tflops=62.5)),
    ("RTX 4090", Peaks(165.2, 82.6, 1.008, tf32_tensor_tflops=82.6)),
    ("RTX 3080", Peaks(59.5, 29.8, 0.76, tf32_tensor_tflops=29.8)),
    ("T4", Peaks(65.0, 8.1, 0.32)),
    ("V100", Peaks(125.0, 15.7, 0.9)),
    ("GTX 1660 SUPER", Peaks(10.1, 5.0, 0.336)),  # Turing TU116 has no tensor cores; fp16 via FMA
)
# T4, V100 and the GTX 1660 predate TF32 (Ampere): their fp32 work runs on FFMA only.


def peaks_for(device_name: str | None) -> Peaks | None:
    if not device_name:
        return None
    for key, peaks in _PEAKS:
        if key.lower() in device_name.lower():
            return peaks
    return None
