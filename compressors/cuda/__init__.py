"""CUDA kernels of the compressors (``impl="cuda"``), run through CuPy on CUDA tensors.

One ``<method>.cu`` per method here, after ``common.cuh`` (``build``); compiled by
NVRTC through ``cupy.RawModule`` once per process and cached on disk by CuPy
(``launch``). Nothing here imports CuPy until a compressor first runs on a CUDA
tensor, so ``import compressors`` works without CuPy or a GPU.
"""
