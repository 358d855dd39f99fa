"""imagenet-zsl: zero-shot-learning benchmarks on ImageNet-21K and the attribute datasets."""

__version__ = "0.1.0"
