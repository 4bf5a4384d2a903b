"""Data-parallel training on heterogeneous GPUs: EDDIS modes, DDP and Horovod."""
