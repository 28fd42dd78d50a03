"""The kinds of value the shared analysis tells apart."""

from __future__ import annotations

import enum


class Kind(enum.Enum):
    TENSOR = "tensor"
    NUMPY = "numpy"
    MODULE = "module"  # an nn.Module instance: a model or a loss module
    LOADER = "loader"
    OPTIMIZER = "optimizer"
    HOST = "host"  # a plain Python value: number, string, list, dict...
    UNKNOWN = "unknown"
