"""TL6xx: multi-GPU and distributed."""
