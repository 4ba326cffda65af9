"""Messages between processes: authenticated msgpack batches over pyzmq (``sockets``), what the
wire can carry and the stable field hash (``wire``), and the control message kinds
(``messages``). Knows nothing of topologies."""
