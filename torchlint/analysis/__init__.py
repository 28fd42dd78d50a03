"""The shared analysis every check leans on."""
