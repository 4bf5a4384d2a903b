"""The emulator's measured settings, read from a local calibration profile.

`cxlsim calibrate` measures where the pool allreduce's large algorithm (reduce-scatter +
allgather) starts to beat the small one (every rank folds every block) and keeps it in its
profile as ``emulator.allreduce_large_bytes``. Naming that profile in the environment
variable CXLSIM_PROFILE makes it the default threshold of every pool communicator
(`PoolComm.open`, `run_local`, `run_mpi`, `cxlsim bench allreduce`, and the MPI library's under
`cxlsim mpi run`); without it the default
is DEFAULT_ALLREDUCE_LARGE_BYTES (64 KiB, the MPI library's default too). A profile that
cannot be read, or whose value is not a byte count, is an InputError naming the variable.
"""
from __future__ import annotations

import json
import os

from cxlsim.errors import InputError

PROFILE_VARIABLE = "CXLSIM_PROFILE"
DEFAULT_ALLREDUCE_LARGE_BYTES = 65536


def allreduce_large_bytes(environ=os.environ) -> tuple[int, str]:
    """(threshold in bytes, where it came from: 'default', or 'measured[ in the fast|slow host placement], PATH'):
    the profile named by CXLSIM_PROFILE, else the default."""
    path = environ.get(PROFILE_VARIABLE)
    if not path:
        return DEFAULT_ALLREDUCE_LARGE_BYTES, "default"
    try:
        with open(path, encoding="utf-8") as f:
            profile = json.load(f)
    except (OSError, ValueError) as exc:
        raise InputError(f"{PROFILE_VARIABLE}={path}: cannot read the calibration profile ({exc})") from None
    section = profile.get("emulator") if isinstance(profile, dict) else None
    value = section.get("allreduce_large_bytes") if isinstance(section, dict) else None
    if value is None:
        raise InputError(f"{PROFILE_VARIABLE}={path}: the profile has no emulator.allreduce_large_bytes "
                         f"(re-run 'cxlsim calibrate' to measure it)")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{PROFILE_VARIABLE}={path}: emulator.allreduce_large_bytes: expected a number of "
                         f"bytes >= 0, got {value!r}")
    measured = section.get("allreduce_threshold")
    placement = measured.get("placement") if isinstance(measured, dict) else None
    where = f" in the {placement} host placement" if isinstance(placement, str) else ""
    return value, f"measured{where}, {path}"
