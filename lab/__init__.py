"""Flash Lab: build, check, time, profile and explain a ladder of Flash-Attention kernels."""

__version__ = "0.1.0"
