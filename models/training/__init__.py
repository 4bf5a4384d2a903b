"""Data-parallel training on heterogeneous GPUs: EDDIS modes, DDP and Horovod.

Importing the package registers every mode in `modes.MODES` (hybrid and
horovod live in their own modules and register themselves).
"""
from cxlsim.models.training import hybrid as _hybrid  # noqa: F401  (registers 'hybrid')
from cxlsim.models.training import horovod as _horovod  # noqa: F401  (registers 'horovod')
