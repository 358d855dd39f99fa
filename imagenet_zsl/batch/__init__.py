"""Batch evaluation: `imagenet-zsl run` trains many models and evaluates them on many splits."""
