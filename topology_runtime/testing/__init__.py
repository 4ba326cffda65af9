"""Tools for testing topologies: fault injection at named protocol points, waiting helpers.
Users may import them for their own tests; the engine only calls the fault hook."""
