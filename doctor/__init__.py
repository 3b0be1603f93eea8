"""mirrorwatch-doctor: will two GPUs give 2x? The causes the run report names, checked before."""
