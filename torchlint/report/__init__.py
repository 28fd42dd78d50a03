"""Reporters: findings to text or JSON."""
