"""torchlint: find PyTorch performance anti-patterns, and measure what they cost."""

__version__ = "0.1.0"
