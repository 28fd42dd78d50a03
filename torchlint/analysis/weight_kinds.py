"""What a module class does with its weights, as the file summary records it (``ClassSummary.weights``),
named here without libcst so the join and the settling of findings read it on a warm run that parses
nothing (analysis/frozen.py decides it)."""

TRAINABLE = "trainable"  # registers weights and never freezes them
# Trainable too, its weights a torchvision model's (VGG, ResNet): an ImageNet classifier's layers, a
# perceptual loss's or a teacher's, commonly as large as the network trained or larger (TL308's tier).
BACKBONE = "backbone"
WEIGHTED = frozenset({TRAINABLE, BACKBONE})  # what keeps weights that get gradients
FROZEN = "frozen"  # turns its weights' gradients off (or runs without grad)
# A module that registers buffers and no weights (a running mean and variance): nothing of it takes a
# gradient, so autograd records nothing through it for inputs made without grad (TL301's join).
BUFFERS = "buffers"
