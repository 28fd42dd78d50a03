"""TL3xx: autograd and memory."""
