"""TL2xx: data loading and tensor creation."""
