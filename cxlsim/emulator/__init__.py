"""The emulator: a real allgather among local processes on an emulated CXL pool."""
