"""Layer 3: how one process measures: settings, the session, threads and their observation, the
allocator, the roofline's ceilings, the fingerprint, machine load, memory, thread sweeps and
--isolate workers, known framework issues. It imports core, workloads and frameworks."""
