"""cxlsim: emulate and simulate collectives over CXL shared-memory pools.

The emulator (`cxlsim.emulator`) runs a real shared-memory allgather among
local processes; the simulator (`cxlsim.fabric`, `cxlsim.models`) projects
multi-node fabrics with SimPy. docs/architecture.md draws the layers and says
which file owns what.
"""
__version__ = "0.1.0"
