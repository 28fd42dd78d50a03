"""TL5xx: precision and compilation."""
