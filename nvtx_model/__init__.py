"""NVTX-instrumented Transformer language model (CS336 basics architecture)."""
