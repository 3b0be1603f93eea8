"""The simulated GPU backend: scenario files drive every reading NVML would give."""
