"""TL4xx: model architecture."""
