"""Hardware models: links, NICs, switches, CXL memory, coherence, topologies (simulated)."""
