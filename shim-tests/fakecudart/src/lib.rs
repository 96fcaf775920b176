//! Simulated CUDA runtime (libcudart.so.12).
