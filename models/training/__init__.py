"""Data-parallel training on heterogeneous GPUs: the EDDIS modes, PyTorch DDP and Horovod.

core.py holds what every mode is built from (the job, the results, the `Mode`
record and the run machinery); each mode is one module with one `Mode` record;
modes.py lists them (plus plug-ins') by name. cluster.py reads cluster specs,
profiles.py the GPU and DNN figures, stragglers.py the compute-time noise,
convergence.py the optional convergence model.
"""
